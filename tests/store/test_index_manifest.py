"""The index manifest (``manifest.json``): written through ``atomic_file`` (CRC and
``.bak``); a corrupt manifest falls back to its backup, and with neither usable the
manifest is re-derived from the files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from broker_core.store.index_manifest import (
    MANIFEST_NAME,
    SealedFile,
    read_manifest,
    write_manifest,
)
from broker_core.store.index_service import IndexService
from tests.store.index_support import fill

BAK = MANIFEST_NAME + ".bak"


def sealed_service(directory: Path, messages: int) -> list[str]:
    """An index of ``messages`` messages (files of 5), closed; returns the file names."""
    svc = IndexService(directory, 8, 10)
    fill(svc, messages)
    names = svc.file_names
    svc.close()
    return names


def flip_a_digit(path: Path) -> None:
    """Corrupt the file while it still parses as JSON: only the CRC can tell."""
    text = path.read_text()
    i = text.index('"index_count": ') + len('"index_count": ')
    path.write_text(text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1 :])
    json.loads(path.read_text())


def test_the_manifest_carries_a_crc_and_keeps_a_backup(tmp_path: Path) -> None:
    sealed_service(tmp_path, 17)  # three rolls: three manifest writes
    doc = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert set(doc) == {"format", "crc32", "data"}
    assert (tmp_path / BAK).exists()


def test_a_corrupt_manifest_falls_back_to_its_backup(tmp_path: Path) -> None:
    names = sealed_service(tmp_path, 17)  # files of 5 messages: 0-4, 5-9, 10-14, 15-16
    flip_a_digit(tmp_path / MANIFEST_NAME)
    os.remove(tmp_path / names[1])  # a sealed file lost as well: the backup still finds it
    svc = IndexService(tmp_path, 8, 10)
    report = svc.validate_and_repair()
    assert any("fails its checksum" in line and BAK in line for line in report), report
    assert any(names[1] in line and "missing" in line for line in report), report
    assert svc.rebuild_from == 500 and svc.max_phys_offset == 400
    svc.close()
    records, problem = read_manifest(tmp_path)  # rewritten good at load
    assert problem == "" and list(records) == names[:1]


def test_an_unparsable_manifest_uses_the_backup(tmp_path: Path) -> None:
    sealed_service(tmp_path, 12)
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    svc = IndexService(tmp_path, 8, 10)
    report = svc.validate_and_repair()
    assert len(report) == 1 and "does not parse" in report[0] and BAK in report[0]
    assert svc.rebuild_from is None and len(svc.query("all", 0, 2**62, 100)) == 12
    svc.close()


def test_manifest_and_backup_corrupt_is_reported_and_rebuilt(tmp_path: Path) -> None:
    names = sealed_service(tmp_path, 17)
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    (tmp_path / BAK).write_text("{not json either")
    svc = IndexService(tmp_path, 8, 10)
    report = svc.validate_and_repair()
    assert len(report) == 1 and "no usable backup" in report[0]
    assert svc.rebuild_from is None and len(svc.query("all", 0, 2**62, 100)) == 17
    assert svc.sealed_names == names[:-1]  # re-derived: every file but the newest is sealed
    svc.close()
    records, problem = read_manifest(tmp_path)  # written anew, good
    assert problem == "" and list(records) == names[:-1]


def test_lost_manifest_is_rebuilt_from_the_files(tmp_path: Path) -> None:
    names = sealed_service(tmp_path, 17)
    (tmp_path / MANIFEST_NAME).unlink()
    (tmp_path / BAK).unlink()
    svc = IndexService(tmp_path, 8, 10)
    assert svc.validate_and_repair() == []
    assert svc.sealed_names == names[:-1]  # every file but the newest is sealed
    svc.close()
    os.remove(tmp_path / names[2])
    svc = IndexService(tmp_path, 8, 10)
    assert any(names[2] in line for line in svc.validate_and_repair())
    assert svc.rebuild_from == 1000
    svc.close()


def test_backup_records_of_files_retention_deleted_are_not_losses(tmp_path: Path) -> None:
    names = sealed_service(tmp_path, 17)
    svc = IndexService(tmp_path, 8, 10)
    assert svc.delete_before(500) == names[:1]  # the manifest forgets it; its .bak does not
    svc.close()
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    svc = IndexService(tmp_path, 8, 10)
    report = svc.validate_and_repair()
    assert len(report) == 1 and BAK in report[0], report
    assert svc.rebuild_from is None and svc.file_names == names[1:]
    svc.close()


def test_a_manifest_of_the_older_plain_format_is_read(tmp_path: Path) -> None:
    record = SealedFile("20231114221320000", 0, 400, 10)
    write_manifest(tmp_path, [record])
    (tmp_path / BAK).unlink(missing_ok=True)
    doc = json.loads((tmp_path / MANIFEST_NAME).read_text())["data"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(doc))  # as versions before the CRC
    assert read_manifest(tmp_path) == ({record.name: record}, "")
