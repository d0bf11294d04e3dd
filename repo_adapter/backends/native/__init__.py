"""Triton's C/C++ backends (``libtriton_<name>.so``) hosted by rayton: the host library's
sources, its build, and its Python binding (:mod:`repo_adapter.backends.native.host`)."""
