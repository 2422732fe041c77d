"""Statistical assertions of the test suite: those of the public conformance suite
(:mod:`isingattn.testing`), where every helper states its false-failure rate."""

from isingattn.testing import (  # noqa: F401 (re-exported for the test modules)
    ALPHA,
    Z_ALPHA,
    assert_chi2_matches,
    assert_mean_within_mcse,
    chi2_pvalue,
    ess,
)
