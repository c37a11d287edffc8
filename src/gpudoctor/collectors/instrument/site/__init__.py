"""Holds only ``sitecustomize.py``; this directory (not the package) goes on ``PYTHONPATH``."""
