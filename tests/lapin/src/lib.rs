//! Warren driven by lapin (the Rust AMQP client) against a broker started in process; the
//! tests are in `tests/`. No library code: lapin is only a dev-dependency.
