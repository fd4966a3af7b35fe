"""Studies built on the engines and sweeps (above them in the layers: they replay, price and
compare), e.g. predictor_compare.py: each expert predictor's recall and what it buys ecospec."""
