//! Scenarios: one command per seed experiment.
pub async fn main(_args: Vec<String>) -> anyhow::Result<()> {
    anyhow::bail!("no scenarios yet")
}
