"""A PEP 517 build backend for brig-client, from the standard library alone.

brig-client is one pure-Python package without dependencies; building it needs nothing
from a package index, so that `pip install ./clients/python` works offline. The wheel
and the sdist are written with `zipfile` and `tarfile`; the metadata comes from the
`[project]` table of pyproject.toml (read with `tomllib`, Python 3.11 and later).
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "brig_client"


def _project():
    try:
        import tomllib
    except ImportError:  # Python 3.9 and 3.10
        raise RuntimeError(
            "building brig-client needs Python 3.11 or later (tomllib); with an older "
            "Python, put clients/python on PYTHONPATH instead of installing it"
        ) from None
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _names(project):
    dist = project["name"].replace("-", "_")
    return dist, project["version"], f"{dist}-{project['version']}"


def _metadata(project):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"License: {project['license']['text']}",
        f"Requires-Python: {project['requires-python']}",
        "Description-Content-Type: text/markdown",
        "",
    ]
    with open(os.path.join(ROOT, project["readme"]), encoding="utf-8") as f:
        return "\n".join(lines) + "\n" + f.read()


def _package_files():
    """The package's files, relative to ROOT, in a fixed order."""
    found = []
    for directory, subdirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                found.append(os.path.relpath(os.path.join(directory, name), ROOT))
    return found


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(data)}"


def _write_wheel(wheel_directory, extra=None):
    project = _project()
    dist, _, stem = _names(project)
    filename = f"{stem}-py3-none-any.whl"
    dist_info = f"{stem}.dist-info"
    entries = extra if extra is not None else []
    if extra is None:
        for path in _package_files():
            with open(os.path.join(ROOT, path), "rb") as f:
                entries.append((path.replace(os.sep, "/"), f.read()))
    entries.append((f"{dist_info}/METADATA", _metadata(project).encode()))
    entries.append(
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: brig-client _build/backend.py\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    entries.append((f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode()))
    record = [_record_line(path, data) for path, data in entries]
    record.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(
        os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED
    ) as wheel:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return filename


# PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose .pth file puts this directory on sys.path."""
    dist, _, _ = _names(_project())
    return _write_wheel(wheel_directory, [(f"{dist}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    _, _, stem = _names(project)
    filename = f"{stem}.tar.gz"
    files = ["pyproject.toml", project["readme"], "_build/backend.py"]
    files += [path.replace(os.sep, "/") for path in _package_files()]
    pkg_info = _metadata(project).encode()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as sdist:
        for path in files:
            sdist.add(os.path.join(ROOT, path), arcname=f"{stem}/{path}")
        info = tarfile.TarInfo(f"{stem}/PKG-INFO")
        info.size = len(pkg_info)
        info.mode = 0o644
        sdist.addfile(info, io.BytesIO(pkg_info))
    return filename
