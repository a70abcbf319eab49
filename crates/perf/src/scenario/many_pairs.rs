//! placeholder
use super::Ctx;
use crate::report::Report;
pub async fn run(_ctx: &mut Ctx) -> anyhow::Result<Report> {
    anyhow::bail!("not yet")
}
