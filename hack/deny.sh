#!/usr/bin/env bash
# The dependency policy of deny.toml: licences, bans and sources (`make test`, offline from
# the registry's point of view), or with `--advisories` also the RustSec advisories
# (`make audit`; needs the advisory database from GitHub). Installs cargo-deny when missing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CARGO_DENY_VERSION=0.20.2
if ! cargo deny --version 2>/dev/null | grep -q " $CARGO_DENY_VERSION"; then
  echo "deny: installing cargo-deny $CARGO_DENY_VERSION from crates.io"
  cargo install cargo-deny --locked --version "$CARGO_DENY_VERSION"
fi
checks=(licenses bans sources)
[[ ${1:-} == --advisories ]] && checks+=(advisories)
cargo deny --log-level warn check "${checks[@]}"
