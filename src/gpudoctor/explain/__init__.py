"""``gpudoctor explain``: known GPU-training failures as data, matched against messages and logs.

Imports only ``gpudoctor.records`` and the standard library.
"""

from gpudoctor.explain.catalog import Catalog, Entry, Sample, load_catalog, parse_catalog
from gpudoctor.explain.engine import explain_text
from gpudoctor.explain.ranking import confidence_band

__all__ = [
    "Catalog",
    "Entry",
    "Sample",
    "confidence_band",
    "explain_text",
    "load_catalog",
    "parse_catalog",
]
