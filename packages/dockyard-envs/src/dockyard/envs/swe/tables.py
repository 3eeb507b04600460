"""The translation tables of SWE-bench specs: Python versions to Debian releases, conda package
names to PyPI or Debian ones, Ubuntu package names to Debian ones, downloads to Debian packages.

Each table is a plain dict an operator can extend (``CONDA_TO_PIP["foo"] = "foo-py"``) before
loading instances. A name not in a table is taken as is (conda-forge and PyPI agree on most
names; Ubuntu and Debian on most packages); :data:`CONDA_ONLY` lists the conda packages with
no pip or Debian equivalent, refused with their reason.
"""

from __future__ import annotations

PYTHON_RELEASES = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
"""The Python each Debian release ships (``python:<release>`` bases of the layered builder)."""

CONDA_TO_PIP = {
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",
    "dask-core": "dask",
    "py-opencv": "opencv-python",
    "pytables": "tables",
    "python-graphviz": "graphviz",
    "msgpack-python": "msgpack",
    "pyqt": "PyQt5",
    "netcdf4": "netCDF4",
    "iris": "scitools-iris",
    "typing_extensions": "typing-extensions",
    "python-dateutil": "python-dateutil",
    "pre-commit": "pre-commit",
    "nc-time-axis": "nc-time-axis",
    "setuptools_scm": "setuptools-scm",
    "pyyaml": "PyYAML",
    "ipython": "ipython",
}
"""conda-forge names whose PyPI name differs (others are the same on both)."""

CONDA_TO_DEBIAN = {
    "graphviz": "graphviz",
    "hdf5": "libhdf5-dev",
    "libnetcdf": "libnetcdf-dev",
    "proj": "proj-bin",
    "geos": "libgeos-dev",
    "gdal": "gdal-bin",
    "pandoc": "pandoc",
    "nodejs": "nodejs",
    "ffmpeg": "ffmpeg",
    "imagemagick": "imagemagick",
    "ghostscript": "ghostscript",
    "make": "make",
    "pkg-config": "pkg-config",
    "freetype": "libfreetype-dev",
    "qhull": "libqhull-dev",
    "libspatialindex": "libspatialindex-dev",
    "eccodes": "libeccodes-dev",
    "cairo": "libcairo2-dev",
    "texlive-core": "texlive",
    "inkscape": "inkscape",
    "enchant": "libenchant-2-dev",
}
"""conda packages that are system libraries or programs: their Debian packages."""

CONDA_SKIPPED = {
    "python": "the base's Python (python:<release>)",
    "pip": "the base's pip",
    "compilers": "the host's compilers (gcc, g++)",
    "c-compiler": "the host's compilers (gcc)",
    "cxx-compiler": "the host's compilers (g++)",
    "setuptools": "installed with pip where a step names it",
}
"""conda packages the base already provides (a note each, nothing installed)."""

CONDA_ONLY = {
    "cdms2": "CDAT's cdms2 is published on conda only (no PyPI or Debian package)",
    "mkl": "Intel's MKL is a conda binary (numpy's wheels bring OpenBLAS instead)",
    "cudatoolkit": "a CUDA toolkit: no GPU in a sandbox",
    "esmpy": "ESMF's Python bindings are published on conda only",
}
"""conda packages with no pip or Debian equivalent: refused, with the reason."""

UBUNTU_TO_DEBIAN = {
    "libgl1-mesa-glx": "libgl1",
    "libegl1-mesa": "libegl1",
    "libgl1-mesa-dev": "libgl-dev",
    "libgconf-2-4": "libgconf-2-4",
}
"""Ubuntu package names SWE-bench's images (Ubuntu 22.04) use whose Debian name differs."""

RELEASE_RENAMES = {"trixie": {"libasound2": "libasound2t64", "libatk1.0-0": "libatk1.0-0t64"}}
"""Packages renamed by a Debian release (the 64-bit time_t transition of trixie)."""

DOWNLOADS_TO_DEBIAN = {
    "qhull": (
        ["libqhull-dev", "libfreetype-dev", "pkg-config"],
        "printf '[libs]\\nsystem_freetype = true\\nsystem_qhull = true\\n' > mplsetup.cfg",
        "qhull's source from www.qhull.org (outside the package registries) -> Debian's "
        "libqhull-dev and libfreetype-dev, used through mplsetup.cfg's system_qhull / "
        "system_freetype (matplotlib >= 3.3 reads mplsetup.cfg)",
    ),
}
"""Steps that download a library's source from a project site, keyed by a word of the step:
(Debian packages, a repository-stage command that makes the build use them, the note)."""

COMPILED_REPOS = {
    "astropy/astropy",
    "matplotlib/matplotlib",
    "scikit-learn/scikit-learn",
    "pandas-dev/pandas",
    "numpy/numpy",
    "scipy/scipy",
}
"""Repositories whose editable install compiles extensions even without build flags."""

REGISTRY_ECOSYSTEMS = {
    "py": "",
    "js": "",
    "go": "Go modules (proxy.golang.org)",
    "java": "Maven Central",
    "rs": "crates.io",
    "php": "Packagist",
    "rb": "RubyGems",
    "c": "",
}
"""What each language's build downloads from that the sandbox's egress does not reach ('' when
it reaches what the language needs: PyPI, the npm registry, Debian's archive)."""


def debian_name(pkg: str, release: str) -> str:
    """The Debian package of an Ubuntu package name, in ``release``."""
    name = UBUNTU_TO_DEBIAN.get(pkg, pkg)
    return RELEASE_RENAMES.get(release, {}).get(name, name)


def nearest_release(python: str | None) -> tuple[str, str]:
    """``(release, note)``: the Debian release shipping ``python`` (X.Y), else the nearest one
    (ties go to the older release: the pins of a spec are of its time); the note says so."""
    if not python:
        return "bookworm", "no python given: bookworm's Python 3.11"
    if python in PYTHON_RELEASES:
        return PYTHON_RELEASES[python], ""
    try:
        want = int(python.split(".")[1])
    except (IndexError, ValueError):
        return "bookworm", f"python {python!r} is not X.Y: bookworm's Python 3.11"
    minor = {v: int(v.split(".")[1]) for v in PYTHON_RELEASES}
    have = sorted(minor, key=lambda v: (abs(minor[v] - want), minor[v]))
    got = have[0]
    return PYTHON_RELEASES[got], f"python {python}: no Debian release ships it; the nearest, {got}"
