//! A bounded queue whose one consumer sleeps without spinning.
//!
//! `crossbeam_channel`'s blocking receive spins and then calls
//! `sched_yield` a few times before it parks, which pays when the next
//! message comes within microseconds and the machine has a core to spare.
//! The venue's sequencer and journal-sync threads wait on such queues
//! between batches; with requests some tens of microseconds apart (open
//! load at tens of thousands a second) the next one almost never comes
//! within the spin, and on a small machine the spinning takes the CPU the
//! gateway and the clients need: a fifth of the sequencer thread's time in
//! the REST benchmark's open loop (`perf`, seventh session). Here the
//! consumer looks at the queue and, if it is empty, parks at once; a
//! sender unparks it only when it said it sleeps.
//!
//! Wake-ups cannot be lost: the consumer announces that it sleeps and then
//! looks at the queue again; a sender puts its message in and then looks at
//! the announcement, with a sequentially consistent fence on both sides, so
//! at least one of them sees the other (and a thread's unpark before its
//! park makes the park return at once). The last sender's drop wakes the
//! consumer too, so that it sees the queue disconnected. A consumer of
//! several queues shares one `Doorbell` among them.

use std::mem::ManuallyDrop;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    Receiver, RecvError, RecvTimeoutError, SendError, Sender, TryRecvError, TrySendError,
};

/// The consumer's announcement that it sleeps, and where to wake it.
#[derive(Debug, Default)]
struct Bell {
    sleeping: AtomicBool,
    consumer: OnceLock<Thread>,
}

impl Bell {
    /// After a message went in (or a sender went away): wakes the consumer
    /// if it sleeps.
    fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(consumer) = self.consumer.get() {
                consumer.unpark();
            }
        }
    }
}

/// One consumer's wake-up, shared by the queues it waits on (the
/// websocket publisher waits on two).
#[derive(Debug, Default)]
pub struct Doorbell {
    bell: Arc<Bell>,
}

impl Doorbell {
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// A queue of at most `capacity` messages whose senders ring this bell.
    /// At least one: a queue of none only hands over to a receiver blocked
    /// inside it, which a bell's consumer never is.
    pub fn bounded<T>(&self, capacity: usize) -> (BellSender<T>, Receiver<T>) {
        assert!(capacity > 0, "a bell queue holds at least one message");
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        (self.sender(tx), rx)
    }

    /// A queue without a bound whose senders ring this bell.
    pub fn unbounded<T>(&self) -> (BellSender<T>, Receiver<T>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (self.sender(tx), rx)
    }

    fn sender<T>(&self, tx: Sender<T>) -> BellSender<T> {
        BellSender {
            tx: ManuallyDrop::new(tx),
            bell: self.bell.clone(),
            senders: Arc::new(AtomicUsize::new(1)),
        }
    }

    /// Calls `poll` until it gives something, parking the calling thread
    /// (the one consumer) in between, until `deadline` (for ever with
    /// `None`; then `None` is never returned). `poll` must try every queue
    /// of this bell and report a disconnected one as something, or a
    /// consumer could sleep through the last sender's going.
    pub fn wait<R>(
        &self,
        deadline: Option<Instant>,
        mut poll: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        let current = std::thread::current();
        let consumer = self.bell.consumer.get_or_init(|| current.clone());
        // A second consumer thread would sleep through its wake-ups.
        assert_eq!(
            consumer.id(),
            current.id(),
            "a doorbell has one consumer thread"
        );
        loop {
            if let Some(found) = poll() {
                return Some(found);
            }
            let left = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return None,
                },
                None => None,
            };
            self.bell.sleeping.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if let Some(found) = poll() {
                self.bell.sleeping.store(false, Ordering::Relaxed);
                return Some(found);
            }
            match left {
                Some(left) => std::thread::park_timeout(left),
                None => std::thread::park(),
            }
            self.bell.sleeping.store(false, Ordering::Relaxed);
        }
    }
}

/// One look at a queue, for a `Doorbell::wait` poll: `None` when it is
/// empty, else its next message, or `Err` once every sender is gone and
/// nothing is left.
pub fn look<T>(rx: &Receiver<T>) -> Option<Result<T, RecvError>> {
    match rx.try_recv() {
        Ok(message) => Some(Ok(message)),
        Err(TryRecvError::Disconnected) => Some(Err(RecvError)),
        Err(TryRecvError::Empty) => None,
    }
}

/// A queue of at most `capacity` messages with a doorbell of its own (see
/// the module comment).
pub fn bounded<T>(capacity: usize) -> (BellSender<T>, BellReceiver<T>) {
    let bell = Doorbell::new();
    let (tx, rx) = bell.bounded(capacity);
    (tx, BellReceiver { rx, bell })
}

/// The sending side; cloned for each producer.
#[derive(Debug)]
pub struct BellSender<T> {
    tx: ManuallyDrop<Sender<T>>,
    bell: Arc<Bell>,
    /// Senders of this queue alive: only the last one's drop rings (a
    /// sender cloned per batch would otherwise wake the consumer twice).
    senders: Arc<AtomicUsize>,
}

impl<T> Clone for BellSender<T> {
    fn clone(&self) -> Self {
        self.senders.fetch_add(1, Ordering::Relaxed);
        Self {
            tx: ManuallyDrop::new((*self.tx).clone()),
            bell: self.bell.clone(),
            senders: self.senders.clone(),
        }
    }
}

impl<T> Drop for BellSender<T> {
    fn drop(&mut self) {
        // SAFETY: `tx` is dropped here once and never used again; the
        // channel is disconnected before the bell rings, so that a consumer
        // woken by the last sender sees it.
        unsafe { ManuallyDrop::drop(&mut self.tx) };
        if self.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.bell.ring();
        }
    }
}

impl<T> BellSender<T> {
    /// Puts a message in if there is room, without waiting.
    pub fn try_send(&self, message: T) -> Result<(), TrySendError<T>> {
        self.tx.try_send(message)?;
        self.bell.ring();
        Ok(())
    }

    /// Puts a message in, waiting for room while the queue is full.
    pub fn send(&self, message: T) -> Result<(), SendError<T>> {
        self.tx.send(message)?;
        self.bell.ring();
        Ok(())
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.tx.len()
    }

    /// True when no message waits.
    pub fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }
}

/// The receiving side: one consumer, which waits on one thread.
#[derive(Debug)]
pub struct BellReceiver<T> {
    rx: Receiver<T>,
    bell: Doorbell,
}

impl<T> BellReceiver<T> {
    /// The next message, if one waits.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv()
    }

    /// The next message, waiting for it until every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        match self.wait(None) {
            Ok(message) => Ok(message),
            Err(_) => Err(RecvError),
        }
    }

    /// The next message, waiting for it at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.wait(Instant::now().checked_add(timeout))
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// True when no message waits.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    fn wait(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        match self.bell.wait(deadline, || look(&self.rx)) {
            Some(Ok(message)) => Ok(message),
            Some(Err(RecvError)) => Err(RecvTimeoutError::Disconnected),
            None => Err(RecvTimeoutError::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_in_order_and_a_timeout_is_a_timeout() {
        let (tx, rx) = bounded(4);
        tx.try_send(1).unwrap();
        tx.send(2).unwrap();
        assert_eq!(rx.len(), 2);
        assert_eq!(rx.recv_timeout(Duration::from_secs(1)), Ok(1));
        assert_eq!(rx.recv(), Ok(2));
        assert!(rx.is_empty());
        let started = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(30)),
            Err(RecvTimeoutError::Timeout)
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
        for i in 0..4 {
            tx.try_send(i).unwrap();
        }
        assert!(matches!(tx.try_send(9), Err(TrySendError::Full(9))));
    }

    /// A consumer asleep for an hour is woken by each message, and by the
    /// last sender's going; nothing is lost between two threads racing.
    #[test]
    fn a_sleeping_consumer_wakes_for_every_message_and_for_the_last_sender() {
        let (tx, rx) = bounded::<u64>(64);
        let consumer = std::thread::spawn(move || {
            let mut sum = 0;
            let mut n = 0;
            while let Ok(v) = rx.recv_timeout(Duration::from_secs(3600)) {
                sum += v;
                n += 1;
            }
            // The senders are gone: `recv` says so at once.
            assert_eq!(rx.recv(), Err(RecvError));
            (n, sum)
        });
        let producers: Vec<_> = (0..3u64)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        tx.send(p * 1_000_000 + i).unwrap();
                        if i % 1000 == 0 {
                            // Let the consumer fall asleep now and then.
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        drop(tx);
        let (n, sum) = consumer.join().unwrap();
        let expected: u64 = (0..3u64)
            .map(|p| (0..20_000u64).map(|i| p * 1_000_000 + i).sum::<u64>())
            .sum();
        assert_eq!((n, sum), (60_000, expected));
    }

    /// One consumer of two queues with one doorbell wakes for a message on
    /// either, and for either queue's last sender going.
    #[test]
    fn a_doorbell_wakes_its_consumer_for_either_queue() {
        let bell = Doorbell::new();
        let (a_tx, a_rx) = bell.bounded::<u32>(8);
        let (b_tx, b_rx) = bell.unbounded::<&'static str>();
        let consumer = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut a_open = true;
            let mut b_open = true;
            while a_open || b_open {
                let next = bell.wait(Some(Instant::now() + Duration::from_secs(60)), || {
                    let a = a_open.then(|| look(&a_rx)).flatten();
                    let a = a.map(|r| r.map_or("a gone".into(), |v| format!("a{v}")));
                    a.or_else(|| {
                        let b = b_open.then(|| look(&b_rx)).flatten();
                        b.map(|r| r.map_or("b gone".into(), |v| format!("b{v}")))
                    })
                });
                let next = next.expect("woken before the minute");
                a_open &= next != "a gone";
                b_open &= next != "b gone";
                seen.push(next);
            }
            seen
        });
        // Each step once the consumer is likely asleep again (the order of
        // what it sees is not asserted: a slow start may see two at once).
        std::thread::sleep(Duration::from_millis(20));
        b_tx.send("x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        a_tx.send(1).unwrap();
        let a_clone = a_tx.clone();
        drop(a_tx);
        std::thread::sleep(Duration::from_millis(20));
        drop(a_clone);
        std::thread::sleep(Duration::from_millis(20));
        drop(b_tx);
        let seen = consumer.join().unwrap();
        let at = |what: &str| seen.iter().position(|s| s == what).expect(what);
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(
            at("a1") < at("a gone") && at("bx") < at("b gone"),
            "{seen:?}"
        );
    }
}
