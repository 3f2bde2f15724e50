"""gRPC's own log: errors only, unless the environment says otherwise.

Importing this module (the CLI does, before anything imports grpc) sets the default of
`GRPC_VERBOSITY` to ERROR. gRPC's core otherwise writes a line at INFO for every TLS
handshake that fails — a plaintext client, a port scan, a load balancer's TCP check, a client
without the certificate mTLS asks for — on stderr, in a format of its own (`I1128
01:38:56.716080 … Handshake failed …`): one line per connection, unparseable for a log
shipper reading `[logging] format = "json"`. A value the environment already has is kept
(`GRPC_VERBOSITY=INFO` or `DEBUG` to see them again).
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
