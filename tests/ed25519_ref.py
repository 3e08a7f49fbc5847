"""A slow, plain reference of Ed25519 over edwards25519 (RFC 8032 section 5.1), for tests only.

It is the oracle for cvmvm.tx.ed25519: it states FORMAT.md section 7's verification rule
directly on points, and it makes signatures no library would make (keys and nonces with a
component of small order, encodings that are not canonical), so the rule's edges can be tested
against whichever library verifies.  Points are extended coordinates (X, Y, Z, T), x = X/Z,
y = Y/Z, xy = T/Z.
"""

from __future__ import annotations

import hashlib

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int, int, int]
IDENTITY: Point = (0, 1, 1, 0)


def add(a: Point, b: Point) -> Point:
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    e1 = (y1 - x1) * (y2 - x2) % P
    e2 = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * D % P
    zz = 2 * z1 * z2 % P
    e, f, g, h = e2 - e1, zz - c, zz + c, e2 + e1
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def neg(a: Point) -> Point:
    x, y, z, t = a
    return (-x % P, y, z, -t % P)


def mul(s: int, a: Point) -> Point:
    out = IDENTITY
    while s:
        if s & 1:
            out = add(out, a)
        a = add(a, a)
        s >>= 1
    return out


def encode(a: Point) -> bytes:
    x, y, z, _ = a
    zi = pow(z, P - 2, P)
    x, y = x * zi % P, y * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def x_of(y: int, sign: int) -> int | None:
    """The x with this sign bit on the curve at y (y < p), or None (RFC 8032 section 5.1.3)."""
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    return P - x if (x & 1) != sign else x


def decode(b: bytes, canonical: bool = True) -> Point | None:
    """The point a 32-byte encoding names; with ``canonical`` False, y may be given as y + p."""
    v = int.from_bytes(b, "little")
    y, sign = v & ((1 << 255) - 1), v >> 255
    if y >= P:
        if canonical:
            return None
        y -= P
    x = x_of(y, sign)
    return None if x is None else (x, y, 1, x * y % P)


_GY = 4 * pow(5, P - 2, P) % P
BASE: Point = (x_of(_GY, 0), _GY, 1, x_of(_GY, 0) * _GY % P)  # type: ignore[operator]


def _order8() -> Point:
    for y in range(2, 100):
        for sign in (0, 1):
            x = x_of(y, sign)
            if x is None:
                continue
            t = mul(L, (x, y, 1, x * y % P))  # the point's component of small order
            if encode(mul(4, t)) != encode(IDENTITY):
                return t
    raise AssertionError("no point of order 8 found")


# Every point of small order: the multiples of one of order 8.
TORSION: list[Point] = [mul(k, _order8()) for k in range(8)]
SMALL = frozenset(encode(t) for t in TORSION)


def scalar(*parts: bytes) -> int:
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little") % L


def secret(seed: bytes) -> tuple[int, bytes]:
    h = hashlib.sha512(seed).digest()
    return int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254), h[32:]


def sign(seed: bytes, message: bytes, key_torsion: Point = IDENTITY, nonce_torsion: Point = IDENTITY,
         nonce: int | None = None) -> tuple[bytes, bytes]:
    """(public key, signature): RFC 8032's, or with a component of small order added to the
    public key and to R (a signer no library would be)."""
    a, prefix = secret(seed)
    public = encode(add(mul(a, BASE), key_torsion))
    r = scalar(prefix, message) if nonce is None else nonce
    big_r = encode(add(mul(r, BASE), nonce_torsion))
    s = (r + scalar(big_r, public, message) * a) % L
    return public, big_r + s.to_bytes(32, "little")


def valid(public: bytes, signature: bytes, message: bytes) -> bool:
    """FORMAT.md section 7's rule, stated on points."""
    if len(public) != 32 or len(signature) != 64:
        return False
    big_r, s = signature[:32], int.from_bytes(signature[32:], "little")
    a, r = decode(public), decode(big_r)
    if s >= L or a is None or r is None:
        return False
    if any(encode(mul(8, q)) == encode(IDENTITY) for q in (a, r)):
        return False
    h = scalar(big_r, public, message)
    return encode(add(mul(s, BASE), neg(mul(h, a)))) == big_r
