"""The image's HEALTHCHECK: healthy while `serve` answers /health with status "ready".

Tries https, then http (the container may or may not be given --ssl-cert), on the loopback
where the certificate's name cannot match: the answer is read, not trusted. Exit 0 when
ready, 1 otherwise (a stuck engine says "error": the container is then unhealthy).
Port: $CONTEXTSPAN_HEALTH_PORT, default 8998.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.request

TIMEOUT_S = 4.0


def status(port: int) -> str | None:
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    for scheme in ("https", "http"):
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/health",
                                        timeout=TIMEOUT_S, context=unverified) as answer:
                return str(json.load(answer).get("status"))
        except (OSError, ValueError):
            continue
    return None


if __name__ == "__main__":
    found = status(int(os.environ.get("CONTEXTSPAN_HEALTH_PORT", "8998")))
    print(f"/health: {found or 'no answer'}")
    sys.exit(0 if found == "ready" else 1)
