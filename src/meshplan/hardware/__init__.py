"""Hardware catalog: GPU and interconnect specs from packaged data files, and the Cluster type."""

from meshplan.hardware.catalog import get_gpu, get_interconnect, list_gpus, list_interconnects
from meshplan.hardware.cluster import Cluster
from meshplan.hardware.gpu import GPUSpec
from meshplan.hardware.interconnect import Interconnect

__all__ = [
    "Cluster",
    "GPUSpec",
    "Interconnect",
    "get_gpu",
    "get_interconnect",
    "list_gpus",
    "list_interconnects",
]
