"""Randomized fault campaign for oncestream (issue 11); run with ``make torture``."""
