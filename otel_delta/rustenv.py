"""delta-rs's process-wide log setting, which its Python module reads from the environment
when it loads.

Importing this module (the CLI does, before anything imports deltalake) sets one default; a
value the environment already has is always kept.

- `RUST_LOG=warn,aws_config=error`: delta-rs logs its Rust crates' WARN lines on stderr in a
  format of its own (`[2026-11-29T02:08:59Z WARN  aws_config::imds::region] …`). With no AWS
  credentials anywhere, the AWS SDK's credential chain writes five such lines, hundreds of
  characters each, before our own one line says the same ("an error occurred while loading
  credentials"): a wall of text for a misconfiguration, and unparseable for a log shipper
  reading `[logging] format = "json"`. delta-rs's own warnings stay as they were.
"""

from __future__ import annotations

import os

os.environ.setdefault("RUST_LOG", "warn,aws_config=error")
