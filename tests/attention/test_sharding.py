"""Boltzmann attention inside ``jax.shard_map`` with its default checks (``check_vma=True``):
gradients of every deterministic method over a batch split across devices equal those of the
whole batch on one device (shared couplings get the sum of the shards' gradients), and the
compiled program gathers nothing; and under plain ``jit`` with the batch sharded on an Auto mesh
axis, the transfer kernel and its gradient run on each device's chains (no all-gather, also with
several query tiles per device), also under ``vmap``. Runs in a subprocess with 2 host CPU devices
(``--xla_force_host_platform_device_count``, which must be set before JAX starts)."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from isingattn.attention import Couplings, boltzmann_attention

    assert jax.device_count() == 2
    mesh = jax.make_mesh((2,), ("data",))
    q = jax.random.normal(jax.random.key(0), (4, 10, 2, 4))
    k = jax.random.normal(jax.random.key(1), (4, 10, 2, 4))
    cases = {
        "exact": (Couplings.learned(2, "banded", bandwidth=2), jnp.full((2, 2), 0.4)),
        "transfer": (Couplings.learned(2, "banded", bandwidth=3), jnp.full((2, 3), 0.4)),
        # one head past the float32 fast range: the log-domain path and its gradient
        "transfer-strong": (Couplings.learned(2, "banded", bandwidth=2),
                            jnp.array([[0.4, -0.2], [30.0, -12.0]])),
        "mean_field": (Couplings.learned(2, "relative", max_distance=9), jnp.full((2, 9), 0.1)),
        "tap": (Couplings.learned(2, "relative", max_distance=9), jnp.full((2, 9), 0.1)),
    }
    for name, (c, w) in cases.items():
        method = name.split("-")[0]

        def loss(q, k, w):
            out = boltzmann_attention(q, k, k, couplings=c.replace(w), method=method,
                                      is_causal=True)
            return jnp.sum(out ** 2)

        def sharded(q, k, w):
            val, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, w)
            return jax.lax.psum(val, "data"), grads

        f = jax.jit(jax.shard_map(sharded, mesh=mesh, in_specs=(P("data"), P("data"), P()),
                                  out_specs=(P(), (P("data"), P("data"), P()))))
        put = lambda x, s: jax.device_put(x, NamedSharding(mesh, s))
        args = (put(q, P("data")), put(k, P("data")), put(w, P()))
        compiled = f.lower(*args).compile()  # (called below: one compilation, not two)
        assert "all-gather" not in compiled.as_text(), name  # every device works on its own shard
        val, (gq, gk, gw) = compiled(*args)
        ref_val, (rq, rk, rw) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, w)
        np.testing.assert_allclose(val, ref_val, rtol=1e-5, err_msg=name)
        for a, b, what in ((gq, rq, "query"), (gk, rk, "key"), (gw, rw, "couplings")):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5, err_msg=f"{name} {what}")
        print(name, "ok")

    # plain jit of inputs sharded on an Auto mesh axis: XLA partitions the transfer kernel's
    # chains (custom_partitioning) instead of gathering the batch onto every device
    auto = jax.make_mesh((2,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    c, w = cases["transfer"]

    def loss(q, k, w):
        out = boltzmann_attention(q, k, k, couplings=c.replace(w), method="transfer",
                                  is_causal=True)
        return jnp.sum(out ** 2)

    g = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    args = (jax.device_put(q, NamedSharding(auto, P("data"))),
            jax.device_put(k, NamedSharding(auto, P("data"))), w)
    compiled = g.lower(*args).compile()
    assert "all-gather" not in compiled.as_text()
    val, grads = compiled(*args)
    ref_val, ref = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, w)
    np.testing.assert_allclose(val, ref_val, rtol=1e-5)
    for a, b in zip(grads, ref):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5)
    # the partitioned kernel under vmap (a mapped axis joins the chains)
    many = jax.jit(jax.vmap(lambda q: loss(q, k, w)))(jnp.stack([q, 2 * q]))
    np.testing.assert_allclose(many, [ref_val, loss(2 * q, k, w)], rtol=1e-5)
    # several query tiles per device (512 chains): the gradient's tile loop runs on each
    # device's own tiles (a partitioned VJP: no gather of the batch), couplings' gradient summed
    q2 = jax.random.normal(jax.random.key(5), (4, 256, 1, 4))
    c2 = Couplings.learned(1, "banded", bandwidth=3)
    w2 = jnp.array([[0.3, -0.2, 0.1]])

    def loss2(q, w):
        out = boltzmann_attention(q, q, q, couplings=c2.replace(w), method="transfer",
                                  is_causal=True)
        return jnp.sum(out ** 2)

    g2 = jax.jit(jax.grad(loss2, argnums=(0, 1)))
    args2 = (jax.device_put(q2, NamedSharding(auto, P("data"))), w2)
    compiled = g2.lower(*args2).compile()
    assert "all-gather" not in compiled.as_text()
    for a, b in zip(compiled(*args2), jax.jit(jax.grad(loss2, argnums=(0, 1)))(q2, w2)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5)
    print("auto", "ok")

    # Explicit mesh axes (jax.make_mesh's default): exact and softmax run; the others say so
    explicit = jax.make_mesh((2,), ("data",))
    qe = jax.device_put(q, NamedSharding(explicit, P("data")))
    with jax.set_mesh(explicit):
        jax.jit(lambda q: boltzmann_attention(q, q, q, readout="softmax"))(qe)
        jax.jit(lambda q: boltzmann_attention(q[:, :6], q[:, :6], q[:, :6], method="exact",
                                              couplings=c.replace(w)))(qe)
        try:
            jax.jit(lambda q: boltzmann_attention(q, q, q, method="transfer",
                                                  couplings=c.replace(w)))(qe)
        except ValueError as e:
            assert "Explicit mesh axes" in str(e) and "['data']" in str(e), e
        else:
            raise AssertionError("transfer on Explicit axes did not raise")
    print("explicit", "ok")
''')


def test_gradients_inside_shard_map_with_default_checks_equal_one_device():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=False, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.split() == ["exact", "ok", "transfer", "ok", "transfer-strong", "ok",
                                  "mean_field", "ok", "tap", "ok", "auto", "ok", "explicit", "ok"]


EIGHT = textwrap.dedent('''
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from isingattn.attention import Couplings, boltzmann_attention
    from isingattn.models import random_dense
    from isingattn.samplers import GibbsSampler

    assert jax.device_count() == 8
    q = jax.random.normal(jax.random.key(0), (8, 24, 2, 4))
    for method, c, w in [("transfer", Couplings.learned(2, "banded", bandwidth=3),
                          jnp.full((2, 3), 0.3)),
                         ("mean_field", Couplings.learned(2, "relative", max_distance=23),
                          jnp.full((2, 23), 0.05))]:
        def loss(q, w):
            out = boltzmann_attention(q, q, q, couplings=c.replace(w), method=method,
                                      is_causal=True)
            return jnp.sum(out ** 2)

        ref = jax.jit(jax.grad(loss, argnums=(0, 1)))(q, w)
        mesh = jax.make_mesh((8,), ("data",))
        # (shared couplings get the sum of the shards' gradients from the layer itself)
        inside = jax.jit(jax.shard_map(jax.grad(loss, argnums=(0, 1)), mesh=mesh,
                                       in_specs=(P("data"), P()), out_specs=(P("data"), P())))
        auto = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
        plain = jax.jit(jax.grad(loss, argnums=(0, 1)))
        for f, m in ((inside, mesh), (plain, auto)):
            args = (jax.device_put(q, NamedSharding(m, P("data"))), w)
            compiled = f.lower(*args).compile()  # (called below: one compilation, not two)
            if method == "transfer" or f is inside:
                assert "all-gather" not in compiled.as_text(), method
            for a, b in zip(compiled(*args), ref):
                np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5, err_msg=method)
        print(method, "ok")

    models = random_dense(jax.random.key(1), 6, batch_shape=(8,), beta=0.5)
    mesh = jax.make_mesh((8,), ("data",))
    split = jax.tree.map(lambda x: jax.device_put(x, NamedSharding(
        mesh, P("data") if np.ndim(x) and np.shape(x)[0] == 8 else P())), models)
    one = GibbsSampler().sample(models, jax.random.key(2), 4, num_chains=2)
    eight = GibbsSampler().sample(split, jax.random.key(2), 4, num_chains=2)
    np.testing.assert_array_equal(np.asarray(eight.spins), np.asarray(one.spins))
    assert len(eight.spins.sharding.device_set) == 8
    print("gibbs", "ok")
''')


def test_eight_devices_gradients_and_samples_equal_one_device():
    """The same on 8 host devices: transfer and mean-field gradients inside ``shard_map`` and
    under plain ``jit`` (transfer: no gather either way), and a Gibbs sample of a batch of 8
    models split over the devices."""
    run = subprocess.run([sys.executable, "-c", EIGHT], capture_output=True, text=True,
                         check=False, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.split() == ["transfer", "ok", "mean_field", "ok", "gibbs", "ok"]
