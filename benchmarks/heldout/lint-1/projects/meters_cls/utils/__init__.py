from .meters import AverageMeter, TopKAccuracy
from .timing import timed

__all__ = ["AverageMeter", "TopKAccuracy", "timed"]
