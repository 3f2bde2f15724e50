//! Generates the OTLP message types from the descriptors of the installed Python package.
use std::process::Command;

use prost::Message;

fn main() {
    let python = std::env::var("OTEL_DELTA_PYTHON").unwrap_or_else(|_| "python3".into());
    println!("cargo:rerun-if-env-changed=OTEL_DELTA_PYTHON");
    println!("cargo:rerun-if-changed=descriptors.py");
    let output = Command::new(&python)
        .arg("descriptors.py")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} descriptors.py: {e}"));
    if !output.status.success() {
        panic!(
            "{python} descriptors.py failed (set OTEL_DELTA_PYTHON to the project's .venv python): {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let fds = prost_types::FileDescriptorSet::decode(output.stdout.as_slice())
        .expect("descriptors.py printed an invalid FileDescriptorSet");
    prost_build::Config::new()
        .include_file("otlp.rs")
        .compile_fds(fds)
        .expect("prost-build failed");
}
