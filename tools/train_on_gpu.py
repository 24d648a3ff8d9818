"""Start ``python -m pymtp.train.online`` where pymtp's native library is not built (a GPU
machine given only this checkout): the training package needs torch, numpy and gguf, but
``import pymtp`` loads the library, so this registers the package without running its
``__init__`` and runs the module.

    python tools/train_on_gpu.py run PACK --trunk TRUNK.gguf --device cuda ...   # online.py's arguments
"""

from __future__ import annotations

import runpy
import sys
import types
from pathlib import Path

package = types.ModuleType("pymtp")
package.__path__ = [str(Path(__file__).resolve().parents[1] / "src" / "pymtp")]
sys.modules["pymtp"] = package
sys.argv[0] = "pymtp.train.online"
runpy.run_module("pymtp.train.online", run_name="__main__")
