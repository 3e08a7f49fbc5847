"""Ed25519 verification under one exact rule, whichever library runs it.

RFC 8032 leaves a verifier free on the edges (small-order keys and nonces, encodings
that are not canonical, the cofactor), and libraries differ there: OpenSSL accepts a
"signature" under the identity key for every message, libsodium refuses it.  Nodes that
disagree on a receipt's validity split, so FORMAT.md section 7 fixes the rule:

1. S < L;
2. the public key A and the nonce R are canonical encodings (y < p) of points that are
   not of small order: y is none of SMALL_ORDER_Y;
3. [S]B - [h]A, with h = SHA-512(R || A || M) mod L, encodes to exactly R's 32 bytes
   (no cofactor: an honest nonce plus a point of small order fails it).

Steps 1 and 2 are checked here on the bytes.  Step 3 (and the decoding of A) is the
library's: libsodium when PyNaCl is installed (the ``speed`` extra: about twice as fast),
else OpenSSL through ``cryptography``.  Past step 2 the two agree, and a library is used
only after it gives SELF_TEST's answers, which a cofactored or subgroup-checking
verifier does not: an upgrade that changes a library's rule makes cvmvm use the other
one, or refuse with ``internal.signature``, never verify by another rule.
"""

from __future__ import annotations

import functools
from typing import Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from isa.errors import InternalError

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
_Y_MASK = (1 << 255) - 1

# The y of every point of small order (orders 1, 2, 4 and 8); x = 0 or its negation give
# the same y, so the sign bit does not matter.
SMALL_ORDER_Y = frozenset((
    0,
    1,
    P - 1,
    0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826,
    0x7A03AC9277FDC74EC6CC392CFA53202A0F67100D760B3CBA4FD84D3D706A17C7,
))

Verify = Callable[[bytes, bytes, bytes], bool]   # (public key, signature, message) -> step 3 holds

_MESSAGE = b"cvmvm/ed25519/self-test"
# (public key, signature, message, valid): each passes steps 1 and 2.  An honest signature,
# the same on another message, a key with a component of order 8 whose signature holds
# without the cofactor (a subgroup-checking verifier refuses it), and a nonce with one,
# which holds only with the cofactor (a cofactored verifier accepts it).  tests/ed25519_ref.py
# makes them again.
SELF_TEST = (
    ("4af8ddf619345a748ca3608b8646da35fdf0a5a4c1f9d5a16605d6ec5d43c380",
     "3d3788a89a8e8396708c139d8c2675e1b96c0458d57d976bcdbfbfd8e208b96e"
     "bb218b774e17b91884cc5a83f23ef45ab72afc97573fd67ce7abdadfa4d9fc0e", _MESSAGE, True),
    ("4af8ddf619345a748ca3608b8646da35fdf0a5a4c1f9d5a16605d6ec5d43c380",
     "3d3788a89a8e8396708c139d8c2675e1b96c0458d57d976bcdbfbfd8e208b96e"
     "bb218b774e17b91884cc5a83f23ef45ab72afc97573fd67ce7abdadfa4d9fc0e", _MESSAGE + b"!", False),
    ("ef01fd3ab45fcf82813c42ba288e0b6f984e0927b2a375a25f8be3ee3a2315b2",
     "543ac908ca97124ab06caab11552257e53aba22a4e66b769175823a19a0452e0"
     "603f3b37ae11f0e48146aa5163d7bf76c232aa8fb4c526506ee069f7d838ce0c", _MESSAGE, True),
    ("4af8ddf619345a748ca3608b8646da35fdf0a5a4c1f9d5a16605d6ec5d43c380",
     "37e7e165cf6e1e015694c0302e3013149241de6fe3cb345a391b2bf95adda6af"
     "54b0020b9fe1b4a40a07f0f6c320d5b332fd22356114c885343a1518f28d180e", _MESSAGE, False),
)


def _point_ok(encoding: bytes) -> bool:
    y = int.from_bytes(encoding, "little") & _Y_MASK
    return y < P and y not in SMALL_ORDER_Y


def key_well_formed(public_key: bytes) -> bool:
    """Step 2 for a public key: no signature is valid under a key that fails it."""
    return len(public_key) == 32 and _point_ok(public_key)


def well_formed(public_key: bytes, signature: bytes) -> bool:
    """Steps 1 and 2 of the rule, on the bytes alone."""
    return (key_well_formed(public_key) and len(signature) == 64 and _point_ok(signature[:32])
            and int.from_bytes(signature[32:], "little") < L)


@functools.lru_cache(maxsize=256)
def _openssl_key(raw: bytes) -> Ed25519PublicKey:
    # A chain's receipts come from a few signers: each key is loaded once, not once per receipt.
    return Ed25519PublicKey.from_public_bytes(raw)


def openssl(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        _openssl_key(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _sodium() -> Verify | None:
    try:
        from nacl.bindings import crypto_sign_open
        from nacl.exceptions import BadSignatureError
    except ImportError:
        return None

    def sodium(public_key: bytes, signature: bytes, message: bytes) -> bool:
        try:
            crypto_sign_open(signature + message, public_key)
        except (BadSignatureError, ValueError):
            return False
        return True
    return sodium


def passes_self_test(verify: Verify) -> bool:
    return all(verify(bytes.fromhex(a), bytes.fromhex(s), m) is ok for a, s, m, ok in SELF_TEST)


def candidates() -> list[tuple[str, Verify]]:
    """The libraries to try, fastest first."""
    sodium = _sodium()
    return ([("libsodium", sodium)] if sodium else []) + [("openssl", openssl)]


@functools.lru_cache(maxsize=1)
def backend() -> tuple[str, Verify]:
    """The first library that verifies by the rule (checked once per process)."""
    for name, verify in candidates():
        if passes_self_test(verify):
            return name, verify
    raise InternalError("signature", "no Ed25519 library here verifies by FORMAT.md section 7's rule "
                                   "(each failed cvmvm.tx.ed25519.SELF_TEST)")


def valid(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is a valid Ed25519 signature of ``message`` under ``public_key``
    by FORMAT.md section 7's rule."""
    return well_formed(public_key, signature) and backend()[1](public_key, signature, message)
