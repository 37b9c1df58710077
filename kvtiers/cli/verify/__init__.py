"""``kvtiers verify``: small checks, each returning :class:`CheckResult`, run by :mod:`.runner`."""
