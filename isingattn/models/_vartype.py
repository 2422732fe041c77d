"""Variable types: SPIN (x in {-1, +1}) and BINARY (x in {0, 1})."""

from __future__ import annotations

import enum


class Vartype(str, enum.Enum):
    """The value set of a model's variables.

    ``SPIN``: x in {-1, +1}. ``BINARY``: x in {0, 1}, with ``s = (1 + sigma) / 2``.
    Compares equal to its name, so ``Vartype.SPIN == "SPIN"``.
    """

    SPIN = "SPIN"
    BINARY = "BINARY"

    @property
    def values(self) -> tuple[int, int]:
        """(low, high) value: (-1, +1) for SPIN, (0, 1) for BINARY."""
        return (-1, 1) if self is Vartype.SPIN else (0, 1)

    @property
    def low(self) -> int:
        """The value a masked variable is held at (-1 or 0); it corresponds across vartypes."""
        return self.values[0]


def as_vartype(vartype) -> Vartype:
    """Accept ``"SPIN"``/``"BINARY"`` (any case), a :class:`Vartype`, ``dimod.Vartype``, or the
    value sets ``{-1, 1}`` / ``{0, 1}``."""
    if isinstance(vartype, Vartype):
        return vartype
    name = getattr(vartype, "name", vartype)  # dimod.Vartype has .name
    if isinstance(name, str) and name.upper() in ("SPIN", "BINARY"):
        return Vartype(name.upper())
    if isinstance(vartype, (set, frozenset)):
        if vartype == {-1, 1}:
            return Vartype.SPIN
        if vartype == {0, 1}:
            return Vartype.BINARY
    raise ValueError(f"vartype must be 'SPIN' or 'BINARY' (or dimod.Vartype); got {vartype!r}")
