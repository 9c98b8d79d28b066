"""boto3 against the gateway (run by s3_clients_boto3.rs): path-style
addressing, dummy credentials, every byte compared with the file."""
import os
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, root = sys.argv[1], sys.argv[2]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id="anonymous",
    aws_secret_access_key="ignored",
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
checks = 0


def data(key):
    with open(os.path.join(root, key), "rb") as f:
        return f.read()


def error_code(call, **kwargs):
    try:
        call(**kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError(f"{kwargs}: no error")


keys = ["big.bin", "small.txt", "dir/a b.bin", "dir/é.txt", "empty"]
for key in keys:
    got = s3.get_object(Bucket="media", Key=key)
    assert got["Body"].read() == data(key), key
    assert got["ContentLength"] == len(data(key)), key
    checks += 1

big = data("big.bin")
for start, end in [(0, 0), (100, 1999), (262143, 262144), (1 << 20, (3 << 20) + 122)]:
    got = s3.get_object(Bucket="media", Key="big.bin", Range=f"bytes={start}-{end}")
    assert got["Body"].read() == big[start : end + 1], (start, end)
    assert got["ContentRange"] == f"bytes {start}-{end}/{len(big)}", got["ContentRange"]
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    checks += 1
got = s3.get_object(Bucket="media", Key="big.bin", Range="bytes=-1000")
assert got["Body"].read() == big[-1000:]
checks += 1

head = s3.head_object(Bucket="media", Key="big.bin")
assert head["ContentLength"] == len(big)
etag = head["ETag"]
assert etag.startswith('"') and etag.endswith('"'), etag
assert head["LastModified"].timestamp() == int(os.stat(os.path.join(root, "big.bin")).st_mtime)
got = s3.get_object(Bucket="media", Key="big.bin", IfMatch=etag, Range="bytes=0-3")
assert got["Body"].read() == big[:4]
checks += 2

assert error_code(s3.get_object, Bucket="media", Key="missing") == ("NoSuchKey", 404)
assert error_code(s3.head_object, Bucket="media", Key="missing")[1] == 404
assert error_code(s3.get_object, Bucket="other", Key="big.bin") == ("NoSuchBucket", 404)
assert error_code(s3.get_object, Bucket="media", Key="big.bin", Range="bytes=99999999-") == ("InvalidRange", 416)
assert error_code(s3.get_object, Bucket="media", Key="big.bin", IfMatch='"nope"') == ("PreconditionFailed", 412)
assert error_code(s3.get_object, Bucket="media", Key="escape")[1] in (403, 404)
checks += 6

listed = s3.list_objects_v2(Bucket="media")
assert [o["Key"] for o in listed["Contents"]] == sorted(keys), listed["Contents"]
assert {o["Key"]: o["Size"] for o in listed["Contents"]} == {k: len(data(k)) for k in keys}
top = s3.list_objects_v2(Bucket="media", Delimiter="/")
assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["dir/"]
assert [o["Key"] for o in top["Contents"]] == ["big.bin", "empty", "small.txt"]
under = s3.list_objects_v2(Bucket="media", Prefix="dir/")
assert [o["Key"] for o in under["Contents"]] == ["dir/a b.bin", "dir/é.txt"]
paged = [
    o["Key"]
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="media", PaginationConfig={"PageSize": 2})
    for o in page.get("Contents", [])
]
assert paged == sorted(keys), paged
s3.head_bucket(Bucket="media")
checks += 5
print(f"boto3: {checks} checks passed")
