"""EcoSim's benchmarks: run them all with `bench/run` (see __main__.py); not part of the package."""
