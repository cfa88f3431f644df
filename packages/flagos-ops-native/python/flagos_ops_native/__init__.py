"""flagos-ops-native: vendor native kernel libraries as a flagos op provider.

Not implemented yet: this package installs and registers no provider, so routing files
that name ``native`` skip it with the reason "not installed". It will bind vendor kernel
libraries from a manifest by code generation at build time (nothing generated is checked in).
"""
