"""Experiments built on the service (not part of its core): the DAT paper's reproduction."""
