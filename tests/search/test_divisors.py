"""autopar.space.divisors from the prime factorisation (issue 12: trying every integer up to n
never returned for n = 10^12)."""

from __future__ import annotations

from autopar.space import divisors


def test_matches_trial_division_for_small_n():
    for n in range(1, 2000):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


def test_large_counts():
    # 10^12 = 2^12 5^12: (12 + 1)^2 = 169 divisors; 2^40: 41; a prime near 2^20: 2
    assert len(divisors(10**12)) == 169 and divisors(10**12)[-1] == 10**12
    assert divisors(2**40) == [2**k for k in range(41)]
    assert divisors(1_048_573) == [1, 1_048_573]
    assert divisors(0) == []
