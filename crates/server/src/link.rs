//! The injected reply delay (`walkfs serve --reply-delay-us`): a slow link
//! between client and server, for benchmarks and tests.
//!
//! A link's latency does not occupy the server: the reply is computed at
//! once and then held on a queue until its time, by one thread for the
//! whole server. (Sleeping in the worker instead would cap the requests in
//! flight at the pool's size, so parallel clients could never overlap
//! their round trips as they do over a real link.) Every reply waits the
//! same delay, so the queue is in deadline order already; the replies
//! due when the thread wakes leave in one write per connection.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::conn::Conn;

struct Held {
    due: Instant,
    conn: Arc<Conn>,
    tag: u16,
    reply: Vec<u8>,
}

#[derive(Default)]
struct Queue {
    held: VecDeque<Held>,
    closed: bool,
}

/// The delay line.
pub(crate) struct Link {
    delay: Duration,
    q: Mutex<Queue>,
    cv: Condvar,
}

impl Link {
    /// A link of `delay`, with its thread running.
    pub fn start(delay: Duration) -> Arc<Link> {
        let link = Arc::new(Link {
            delay,
            q: Mutex::new(Queue::default()),
            cv: Condvar::new(),
        });
        let weak = Arc::downgrade(&link);
        let r = std::thread::Builder::new()
            .name("9p-link".into())
            .spawn(move || deliver(weak));
        if let Err(e) = r {
            tracing::error!("cannot start the reply-delay thread: {e}");
        }
        link
    }

    /// Send `reply` to `tag` on `conn` once the delay has passed.
    pub fn send_later(&self, conn: Arc<Conn>, tag: u16, reply: Vec<u8>) {
        let mut q = self.q.lock();
        q.held.push_back(Held {
            due: Instant::now() + self.delay,
            conn,
            tag,
            reply,
        });
        if q.held.len() == 1 {
            self.cv.notify_one();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.q.lock().closed = true;
        self.cv.notify_one();
    }
}

fn deliver(link: Weak<Link>) {
    // Wake on time: the kernel's default timer slack (50 µs) would add
    // to every delay a link of a few hundred µs is meant to show.
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only this
    // thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let mut due_now: Vec<Held> = Vec::new();
    loop {
        let Some(l) = link.upgrade() else { return };
        {
            let mut q = l.q.lock();
            loop {
                if q.closed {
                    return;
                }
                let now = Instant::now();
                match q.held.front() {
                    Some(h) if h.due <= now => {
                        // Everything due goes out together.
                        while q.held.front().is_some_and(|h| h.due <= now) {
                            due_now.extend(q.held.pop_front());
                        }
                        break;
                    }
                    Some(h) => {
                        let due = h.due;
                        l.cv.wait_until(&mut q, due);
                    }
                    // Wake now and then to notice the server is gone.
                    None => {
                        l.cv.wait_for(&mut q, Duration::from_millis(200));
                        if q.held.is_empty() {
                            break;
                        }
                    }
                }
            }
        }
        drop(l);
        // One write per connection for the replies due together.
        while let Some(first) = due_now.first() {
            let conn = Arc::clone(&first.conn);
            let mut batch = Vec::new();
            due_now.retain_mut(|h| {
                if Arc::ptr_eq(&h.conn, &conn) {
                    batch.push((h.tag, std::mem::take(&mut h.reply)));
                    false
                } else {
                    true
                }
            });
            conn.finish_all(&batch);
        }
    }
}
