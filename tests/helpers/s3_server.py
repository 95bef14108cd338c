"""A local S3 server for the tests: moto's server (the real S3 protocol over HTTP), started
as its own process on 127.0.0.1, and the environment that points boto3, s3fs and
TensorBoard's own S3 reader at it.

``S3Server(auth=True)`` enforces IAM: ``grant`` makes a user allowed to read and write one
bucket only, so a test can be denied access for real (moto answers AccessDenied).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

#: Credentials moto accepts without IAM (any are accepted then).
TEST_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    """moto's S3 server in a process of its own; ``env`` points every S3 client at it."""

    def __init__(self, folder: Path, auth: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(folder / f"moto_{self.port}.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **TEST_KEYS},
        )
        self._wait()
        self.keys = dict(TEST_KEYS)
        self._auth = auth

    def env(self, keys: dict[str, str] | None = None) -> dict[str, str]:
        """Variables that send boto3/s3fs (``AWS_ENDPOINT_URL``) and TensorBoard's S3 reader
        (``S3_ENDPOINT``) to this server, with ``keys`` (default: the test keys)."""
        return {
            **(keys or self.keys),
            "AWS_ENDPOINT_URL": self.url,
            "S3_ENDPOINT": self.url,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, keys: dict[str, str] | None = None):
        """A boto3 S3 client of the server."""
        import boto3

        keys = keys or self.keys
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
        )

    def bucket(self, name: str) -> str:
        """Make a bucket; its URL."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def grant(self, user: str, bucket: str) -> dict[str, str]:
        """A user allowed every S3 action on ``bucket`` only, then IAM enforced from now on
        (``auth=True`` servers): that user's keys."""
        import boto3

        assert self._auth, "grant needs S3Server(auth=True)"
        iam = boto3.client(
            "iam",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=self.keys["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.keys["AWS_SECRET_ACCESS_KEY"],
        )
        iam.create_user(UserName=user)
        policy = (
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", '
            f'"Resource": ["arn:aws:s3:::{bucket}", "arn:aws:s3:::{bucket}/*"]}}]}}'
        )
        iam.put_user_policy(UserName=user, PolicyName="one-bucket", PolicyDocument=policy)
        key = iam.create_access_key(UserName=user)["AccessKey"]
        request = urllib.request.Request(
            f"{self.url}/moto-api/reset-auth", b"0", {"Content-Type": "text/plain"}, method="POST"
        )
        urllib.request.urlopen(request, timeout=10).close()
        return {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
        }

    def upload(self, folder: Path, url: str) -> None:
        """Put every file under ``folder`` at the same relative key under ``url``."""
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        client = self.client()
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                key = "/".join(filter(None, [prefix, path.relative_to(folder).as_posix()]))
                client.upload_file(str(path), bucket, key)

    def _wait(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while True:
            with contextlib.suppress(OSError, urllib.error.URLError):
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
                return
            if self.process.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise RuntimeError(f"moto's server did not start: {self.log.read()[-2000:]}")
            time.sleep(0.2)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@contextlib.contextmanager
def environment(variables: dict[str, str]):
    """``os.environ`` with ``variables`` set, restored after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def unreachable_endpoint() -> str:
    """An endpoint on 127.0.0.1 where nothing listens (a port just freed)."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A local S3 server for a test module, the process's environment pointing at it."""
    server = S3Server(tmp_path_factory.mktemp("s3"))
    try:
        with environment(server.env()):
            yield server
    finally:
        server.close()


def download(server: S3Server, url: str, folder: Path) -> Path:
    """Every object under ``url`` into ``folder`` at its relative path (a local copy of
    the same bytes); ``folder``."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    client = server.client()
    shutil.rmtree(folder, ignore_errors=True)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            target = folder / entry["Key"][len(prefix) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, entry["Key"], str(target))
    return folder
