"""Loop carries inside ``shard_map``: JAX types every array there with the mesh axes it varies
over, and a loop's carry must keep its type through the body. A carry started from a constant
(``jnp.zeros``, a counter) is invariant, while the body computes it from the sharded inputs, so
the loop is refused under ``shard_map``'s default ``check_vma=True``. :func:`carry_like` types
the initial carry as the body will return it (a no-op outside ``shard_map``)."""

from __future__ import annotations

import jax


def _manual_axes():
    mesh = jax.sharding.get_abstract_mesh()
    return frozenset(getattr(mesh, "manual_axes", ()) or ())


def _axes(x):
    t = x if isinstance(x, jax.ShapeDtypeStruct) else jax.typeof(x)
    mat = getattr(t, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(t, "vma", ()) or ())


def _cast(x, axes):
    missing = axes - _axes(x)
    return jax.lax.pcast(x, tuple(sorted(missing)), to="varying") if missing else x


def carry_like(body, init, *args, carry=lambda out: out):
    """``init`` with each array leaf varying over the mesh axes of the same leaf of the carry
    that ``body(init, *args)`` returns (``carry(output)`` picks it: ``out[0]`` for a scan body),
    found by tracing ``body`` (:func:`jax.eval_shape`) until it no longer changes; ``init``
    itself outside ``shard_map``. ``args``: one slice of a scan's ``xs``, or nothing."""
    if not _manual_axes():
        return init
    for _ in range(8):
        out = carry(jax.eval_shape(body, init, *args))
        new = jax.tree.map(lambda x, o: _cast(x, _axes(o)), init, out)
        if all(_axes(a) == _axes(b) for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(init))):
            return new
        init = new
    return init


def first_slice(xs):
    """The first slice of a scan's ``xs`` (its leading axis), for :func:`carry_like`."""
    return jax.tree.map(lambda x: x[0], xs)


def scan(f, init, xs=None, **kwargs):
    """:func:`jax.lax.scan` whose initial carry is typed by :func:`carry_like` (the same call
    outside ``shard_map``)."""
    if _manual_axes():
        x = None if xs is None else first_slice(xs)
        init = carry_like(f, init, x, carry=lambda out: out[0])
    return jax.lax.scan(f, init, xs, **kwargs)


def like(x, ref):
    """``x`` varying over (at least) the mesh axes ``ref`` varies over: a cotangent for
    :func:`jax.vjp` must carry its primal output's type."""
    return jax.tree.map(lambda a, r: _cast(a, _axes(r)), x, ref) if _manual_axes() else x


def sum_like(ct, primal):
    """A custom VJP's cotangent ``ct`` for the input ``primal``: summed (``psum``) over the mesh
    axes it varies over and ``primal`` does not. An input the same on every device (say, shared
    couplings) is used by every device's shard, and its gradient is the sum of theirs, as JAX's
    own transpose rules give."""
    if not _manual_axes():
        return ct

    def one(g, p):
        extra = _axes(g) - _axes(p)
        return jax.lax.psum(g, tuple(sorted(extra))) if extra else g

    return jax.tree.map(one, ct, primal)


def result_like(shape, dtype, *inputs):
    """The ``jax.ShapeDtypeStruct`` of a foreign function's result computed from ``inputs``:
    inside ``shard_map`` typed as varying over their mesh axes (a foreign call's result is
    otherwise typed invariant, and JAX would then sum its cotangent over the devices)."""
    if _manual_axes():
        axes = frozenset().union(*(_axes(x) for x in inputs))
        if axes:
            mat = type(jax.typeof(inputs[0]).manual_axis_type)(
                varying=axes, unreduced=frozenset(), reduced=frozenset())
            sharding = jax.sharding.NamedSharding(jax.sharding.get_abstract_mesh(),
                                                  jax.sharding.PartitionSpec())
            return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding, manual_axis_type=mat)
    return jax.ShapeDtypeStruct(shape, dtype)
