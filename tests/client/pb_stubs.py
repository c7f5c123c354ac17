"""Type stubs of the official package's generated protobuf classes, for mypy.

``rocketmq-python-client`` ships ``definition_pb2``/``service_pb2`` without stubs, so mypy
sees every ``apache.rocketmq.v2`` class as ``Any``. This writes ``typings/rocketmq/…``
(``mypy_path`` in pyproject.toml) from the package's own descriptors with protoc's
``--pyi_out`` (``grpcio-tools``), so annotations such as ``pb.Message`` are checked:

* the descriptors come from the installed modules (their ``serialized_pb``), so the stubs
  describe exactly the classes the code imports;
* enum-typed constructor arguments also accept ``int`` (protobuf does at run time, and our
  status table holds plain ints);
* ``rocketmq`` and ``rocketmq.grpc_protocol`` get a module ``__getattr__``: what has no
  stub here (the client classes, ``service_pb2_grpc``) stays ``Any``.

Regenerate after upgrading the package: ``.venv/bin/python -m tests.client.pb_stubs``
(``test_pb_stubs.py`` fails while the stubs are stale).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from rocketmq.grpc_protocol import service_pb2

ROOT = Path(__file__).resolve().parents[2]
TYPINGS = ROOT / "typings"
PACKAGE = "rocketmq/grpc_protocol"
MODULES = ("definition", "service")
ANY_MODULE = "from typing import Any\n\ndef __getattr__(name: str) -> Any: ...\n"
_ENUM_ARG = re.compile(r"_Union\[(\w+(?:\.\w+)*), str\]")


def _descriptor_set() -> bytes:
    files = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd: FileDescriptor) -> None:
        if fd.name not in seen:
            for dependency in fd.dependencies:
                add(dependency)
            seen.add(fd.name)
            proto = files.file.add()
            fd.CopyToProto(proto)

    add(service_pb2.DESCRIPTOR)
    return files.SerializeToString()


def _polish(text: str) -> str:
    text = text.replace(
        "import definition_pb2 as _definition_pb2",
        "from rocketmq.grpc_protocol import definition_pb2 as _definition_pb2",
    )
    return _ENUM_ARG.sub(r"_Union[\1, str, int]", text)


def generate() -> dict[str, str]:
    """Stub path (relative to ``typings/``) → text."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "set.pb").write_bytes(_descriptor_set())
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"--descriptor_set_in={tmp}/set.pb",
                f"--pyi_out={tmp}",
                *(f"{name}.proto" for name in MODULES),
            ],
            check=True,
        )
        stubs = {
            f"{PACKAGE}/{name}_pb2.pyi": _polish((Path(tmp) / f"{name}_pb2.pyi").read_text())
            for name in MODULES
        }
    stubs["rocketmq/__init__.pyi"] = ANY_MODULE
    stubs[f"{PACKAGE}/__init__.pyi"] = ANY_MODULE
    return stubs


def main() -> None:
    for path, text in generate().items():
        target = TYPINGS / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
