"""flagos-ops-gems: FlagGems Triton kernels as a flagos op provider.

Not implemented yet: this package installs and registers no provider, so routing files
that name ``gems`` skip it with the reason "not installed" (see flagos.routing.explain).
It will serve the ops FlagGems implements, on HALs whose memory is CUDA-addressable.
"""
