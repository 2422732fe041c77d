"""Numerical constants shared by the packages."""

#: A finite stand-in for infinity in the log-weights and fields of held (masked) variables:
#: ``exp(-BIG)`` is 0 in every float dtype, and unlike ``inf`` it makes no ``inf - inf = nan``
#: in the sums and differences of a recursion or its gradient.
BIG = 1e30
