"""Container health probe: exit 0 when the local gateway answers 200 on a path, else 1.

    python deploy/healthcheck.py            # GET /health (liveness: the process answers)
    python deploy/healthcheck.py /ready     # GET /ready (engine loaded, registry reachable)

Used by the image's HEALTHCHECK and the compose file. Standard library only, so the probe costs
no image layer (no curl) and stays fast: importing the gateway would pull in torch.
The port comes from HEDGESPEC_PORT, like the server's.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 4.0


def probe(path: str = "/health", port: str | None = None) -> int:
    port = port or os.environ.get("HEDGESPEC_PORT") or "8000"
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as exc:  # 503 from /ready while the engine loads
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"healthcheck: {url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(probe(sys.argv[1] if len(sys.argv) > 1 else "/health"))
