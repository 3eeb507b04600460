"""Held-out checks for the history rewrite.

Expected: each ref's commits as ``tree|author|email|author time|subject``, newest first, computed
once from the deterministic build with the two files removed (the tree hash pins the content of
every other file at every commit). 0.4 main, 0.3 feature/reports and tag v0.2, 0.3 the removed
contents gone from the object database (only counted when main is right).
"""

import subprocess
import sys

EXPECTED = {
    "refs/heads/main": """
a153d187d21f81745439ad0088a67d37248b9ee5|Kim Novak|kim@example.com|1730864000|health check
12f800aca3e2fdfab742a564f1a85aedd40e3b99|Kim Novak|kim@example.com|1730777600|stop tracking local files
5e36b59b438c1b3ec6d09cbd9e9524c8e9c2da8a|Kim Novak|kim@example.com|1730691200|docs: how to run
4e8d00f3cf7486812754b49dc06a35e9e34a0040|Raj Iyer|raj@example.com|1730432000|refresh fixtures
31e4946bf693ae35db3c71f0f5ca3df4a57495d3|Raj Iyer|raj@example.com|1730345600|read the port from the environment
bf61133177477c27fda73571fcab676416a7d6bf|Raj Iyer|raj@example.com|1730259200|fixtures for local development
5c0fc9c7e8fb511674798f7d1345cb78e27beb8c|Kim Novak|kim@example.com|1730172800|settings from ini files
569ed3d318e3345c126f736ecf429ff8b8a62122|Kim Novak|kim@example.com|1730086400|initial skeleton
""",
    "refs/heads/feature/reports": """
9b1b7d381afc3f08d44ec5edc28464da888f8786|Raj Iyer|raj@example.com|1730604800|reports: document
40a9f14294be61a7efb40e0cb2d8b1e5f857b8ad|Raj Iyer|raj@example.com|1730518400|reports: user count
4e8d00f3cf7486812754b49dc06a35e9e34a0040|Raj Iyer|raj@example.com|1730432000|refresh fixtures
31e4946bf693ae35db3c71f0f5ca3df4a57495d3|Raj Iyer|raj@example.com|1730345600|read the port from the environment
bf61133177477c27fda73571fcab676416a7d6bf|Raj Iyer|raj@example.com|1730259200|fixtures for local development
5c0fc9c7e8fb511674798f7d1345cb78e27beb8c|Kim Novak|kim@example.com|1730172800|settings from ini files
569ed3d318e3345c126f736ecf429ff8b8a62122|Kim Novak|kim@example.com|1730086400|initial skeleton
""",
    "refs/tags/v0.2^{commit}": """
31e4946bf693ae35db3c71f0f5ca3df4a57495d3|Raj Iyer|raj@example.com|1730345600|read the port from the environment
bf61133177477c27fda73571fcab676416a7d6bf|Raj Iyer|raj@example.com|1730259200|fixtures for local development
5c0fc9c7e8fb511674798f7d1345cb78e27beb8c|Kim Novak|kim@example.com|1730172800|settings from ini files
569ed3d318e3345c126f736ecf429ff8b8a62122|Kim Novak|kim@example.com|1730086400|initial skeleton
""",
}
# config/.env.local, and data/dump.sql in its two versions
REMOVED_BLOBS = [
    "aa07f4a24540ce31a01c2935d54a90c0e73e4646",
    "2a71ff849aa04917bc9310514db837055102affa",
    "b10496090767f50485d3f25fffa8523a248b21d5",
]


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def ref_ok(ref):
    got = sh("git", "log", "--format=%T|%an|%ae|%at|%s", ref).stdout.strip()
    ok = got == EXPECTED[ref].strip()
    print(f"{'ok  ' if ok else 'FAIL'} {ref}", file=sys.stderr)
    return ok


main = (
    ref_ok("refs/heads/main")
    and sh("git", "symbolic-ref", "-q", "HEAD").stdout.strip() == "refs/heads/main"
    and sh("git", "status", "--porcelain", "--untracked-files=no").stdout.strip() == ""
)
others = ref_ok("refs/heads/feature/reports") & ref_ok("refs/tags/v0.2^{commit}")
present = [b for b in REMOVED_BLOBS if sh("git", "cat-file", "-e", b).returncode == 0]
print(f"removed contents still in the object database: {present}", file=sys.stderr)
print(0.4 * main + 0.3 * others + 0.3 * (main and not present))
