"""Where source texts live: files under the state folder (local) or an S3 bucket (AWS).

Both address a body by (tenant, source name, SHA-256) through digests only (``name_folder``), so
no tenant id or source name can reach a path or key outside its own. A body is immutable: the
same address always holds the same bytes, so a write that a crash interrupted is simply written
again, and readers may cache what they read.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from memtool.errors import NotFound
from memtool.knowledge.sources import check_digest, name_folder

S3_PREFIX = "sources"


class FileSourceBodies:
    """``<root>/<tenant digest>/<name digest>/<sha256>``, each written to a temporary file,
    flushed to disk and renamed into place, so a ``kill -9`` leaves a body whole or absent."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def put(self, tenant: str, name: str, digest: str, body: bytes) -> None:
        path = self._path(tenant, name, digest)
        if path.exists() and path.stat().st_size == len(body):
            return  # immutable: the same address holds the same bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".incoming-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        _fsync_dir(path.parent)

    def get(self, tenant: str, name: str, digest: str) -> bytes:
        path = self._path(tenant, name, digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"the text of source {name} ({digest[:12]}) is not stored", field="version") from None

    def delete(self, tenant: str, name: str) -> int:
        folder = self._root / name_folder(tenant) / name_folder(name)
        removed = 0
        if not folder.is_dir():
            return 0
        for path in folder.iterdir():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += not path.name.startswith(".incoming-")
        with contextlib.suppress(OSError):
            folder.rmdir()
        return removed

    def _path(self, tenant: str, name: str, digest: str) -> Path:
        return self._root / name_folder(tenant) / name_folder(name) / check_digest(digest)


class S3SourceBodies:
    """``s3://<bucket>/sources/<tenant digest>/<name digest>/<sha256>`` through a boto3 S3 client.

    The bucket (template.yaml, SourcesBucket) is private, encrypted and versioned; a delete leaves
    a delete marker, and the bucket's lifecycle rule expires what it hides.
    """

    def __init__(self, client: Any, bucket: str) -> None:
        self._s3 = client
        self._bucket = bucket

    def put(self, tenant: str, name: str, digest: str, body: bytes) -> None:
        self._s3.put_object(
            Bucket=self._bucket,
            Key=self._key(tenant, name, digest),
            Body=body,
            ContentType="text/plain; charset=utf-8",
            Metadata={"sha256": digest},
        )

    def get(self, tenant: str, name: str, digest: str) -> bytes:
        try:
            answer = self._s3.get_object(Bucket=self._bucket, Key=self._key(tenant, name, digest))
        except self._s3.exceptions.NoSuchKey:
            raise NotFound(f"the text of source {name} ({digest[:12]}) is not stored", field="version") from None
        return bytes(answer["Body"].read())

    def delete(self, tenant: str, name: str) -> int:
        prefix = f"{S3_PREFIX}/{name_folder(tenant)}/{name_folder(name)}/"
        removed = 0
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                answer = self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": keys, "Quiet": True})
                failed = answer.get("Errors") or []
                if failed:  # quiet mode lists only the objects S3 could not delete
                    first = failed[0]
                    raise RuntimeError(f"S3 kept {len(failed)} source text(s): {first.get('Code')}: {first.get('Message')}")
                removed += len(keys)
        return removed

    def _key(self, tenant: str, name: str, digest: str) -> str:
        return f"{S3_PREFIX}/{name_folder(tenant)}/{name_folder(name)}/{check_digest(digest)}"


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


__all__ = ["FileSourceBodies", "S3SourceBodies"]
