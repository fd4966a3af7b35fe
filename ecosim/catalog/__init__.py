"""Model shapes and devices as data, each entry with its sources."""

from ecosim.catalog.devices import DEVICES, Device, get_device
from ecosim.catalog.models import MODELS, ModelShape, get_model

__all__ = ["DEVICES", "MODELS", "Device", "ModelShape", "get_device", "get_model"]
