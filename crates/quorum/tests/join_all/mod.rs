//! `futures_join_all` for the quorum integration tests, without a futures dependency.

/// Drives the futures together on the calling task (so that concurrent proposals share log
/// batches) and returns their outputs in order.
pub async fn futures_join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, future) in pinned.iter_mut().enumerate() {
            if done[i].is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(output) => done[i] = Some(output),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}
