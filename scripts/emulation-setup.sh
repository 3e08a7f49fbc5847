#!/usr/bin/env bash
# What tests/test_platforms.py needs to build and run s390x and arm64 Debian roots on a Debian
# host: qemu-user-static (with its binfmt_misc entries), mmdebstrap.  Idempotent; needs root.
# Skip those tests instead with: python -m pytest -m 'not platforms'
set -euo pipefail
need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
[ -x /usr/bin/qemu-s390x-static ] && [ -x /usr/bin/qemu-aarch64-static ] || need+=(qemu-user-static)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# binfmt_misc hands s390x and aarch64 executables to qemu (also inside a chroot: the F flag).
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
for entry in qemu-s390x qemu-aarch64; do
    [ "$(head -n1 "/proc/sys/fs/binfmt_misc/$entry" 2>/dev/null)" = enabled ] || update-binfmts --enable "$entry"
done
