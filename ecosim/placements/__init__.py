"""Where the weights live (placement kinds as small types; see base.py and registry.py)."""

from ecosim.placements.base import Placement, what_fits
from ecosim.placements.hbm import Hbm
from ecosim.placements.registry import PLACEMENTS, parse_placement, register

__all__ = ["PLACEMENTS", "Hbm", "Placement", "parse_placement", "register", "what_fits"]
