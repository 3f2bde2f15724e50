"""gRPC's process-wide settings, which its core reads from the environment when it loads.

Importing this module (the CLI does, before anything imports grpc) sets two defaults; a value
the environment already has is always kept.

- `GRPC_VERBOSITY=ERROR`: gRPC's core otherwise writes a line at INFO for every TLS handshake
  that fails — a plaintext client, a port scan, a load balancer's TCP check, a client without
  the certificate mTLS asks for — on stderr, in a format of its own (`I1128 01:38:56.716080 …
  Handshake failed …`): one line per connection, unparseable for a log shipper reading
  `[logging] format = "json"` (`GRPC_VERBOSITY=INFO` or `DEBUG` shows them again).
- `GRPC_ENABLE_FORK_SUPPORT=false`: with it on, gRPC's fork handlers restart its event
  engine's poller thread in a child made by fork(). A child that runs Python before its exec
  (`subprocess.Popen(preexec_fn=…)`, as PySpark starts its JVM) closes the inherited file
  descriptors first (close_fds), the poller then finds its epoll descriptor gone, and gRPC
  aborts the child (SIGABRT, "Epoll1Poller … epoll_wait error: Bad file descriptor"): seen as
  a bridge that did not start, or a Spark gateway that could not (grpc/grpc#43055). Nothing
  of ours uses gRPC in a forked child: every child execs a program of its own.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
