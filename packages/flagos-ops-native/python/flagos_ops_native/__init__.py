"""flagos-ops-native: vendor C kernel libraries as the flagos op provider ``native``.

A vendor describes its library in a manifest (one line per op: ATen op -> symbol, calling
convention, dtypes; see docs/native.md). At import this package reads every manifest
(``flagos.native`` entry points, or ``FLAGOS_NATIVE_MANIFESTS``), checks it against the
installed torch, opens the library, checks its ABI version, resolves every symbol with
dlsym and binds the ops in its C++ engine, which the flagos dispatcher calls without the
GIL. Anything that fails leaves those ops unserved, with the reason in
``flagos.routing.explain`` and ``python -m flagos info``; it never breaks flagos.

The package ships ``simk``, the reference kernel library of the simulated device.
"""

from __future__ import annotations

# flagos first: importing it discovers the providers, which loads this package's entry
# point (flagos_ops_native.provider) while this module is still initializing.
import flagos  # noqa: F401

from .loader import LibraryStatus
from .provider import NativeProvider, manifest_dir, provider, simk_manifest, statuses

__all__ = ["LibraryStatus", "NativeProvider", "manifest_dir", "provider", "simk_manifest",
           "statuses"]
