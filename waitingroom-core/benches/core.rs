//! Benchmarks of the local queue and the single-node engine with a million visitors queued, and
//! the memory each queued visitor costs.
//!
//! `cargo bench --bench core -- memory` prints only the memory figures (its timed part is
//! empty). Everything is measured on one thread.
//!
//! Times are wall-clock by default. With `BENCH_CLOCK=cpu` (Linux) they are the benchmark
//! thread's CPU time instead, which stays meaningful on a machine busy with other work.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use rand::seq::SliceRandom;
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use waitingroom_core::{
    CheckInStatus, LocalQueue, NodeId, QueueKey, Settings, Ticket, TicketId, Time, WaitingRoom,
};

/// Heap bytes in use, as requested by callers (the allocator's own overhead is not included).
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: every call is forwarded unchanged to `System`; the counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn thread_cpu_time() -> Option<Duration> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut time = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, exclusive timespec for the call to fill in.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (rc == 0).then(|| Duration::new(time.tv_sec as u64, time.tv_nsec as u32))
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

/// A reading of the benchmark clock (see the module docs); only differences mean anything.
fn clock() -> Duration {
    static CPU: OnceLock<bool> = OnceLock::new();
    static START: OnceLock<Instant> = OnceLock::new();
    let cpu = *CPU.get_or_init(|| {
        let cpu =
            std::env::var("BENCH_CLOCK").is_ok_and(|v| v == "cpu") && thread_cpu_time().is_some();
        eprintln!(
            "timing with {}",
            if cpu { "thread CPU time" } else { "wall time" }
        );
        cpu
    });
    if cpu {
        thread_cpu_time().expect("CPU clock worked before")
    } else {
        START.get_or_init(Instant::now).elapsed()
    }
}

const QUEUED: u64 = 1_000_000;
/// Operations timed back to back before the untimed step that restores the queue's size, so
/// the size stays within 0.1% of a million and the clock is read once per thousand operations.
const BATCH: u64 = 1_000;

fn key(join_time: Time, ticket: u64) -> QueueKey {
    QueueKey {
        join_time,
        ticket: TicketId(ticket),
        node: NodeId(1),
    }
}

/// A queue of a million keys that joined one per millisecond, as a node's queue fills.
struct QueueFixture {
    queue: LocalQueue,
    keys: Vec<QueueKey>,
    next_join: Time,
    rng: ChaCha8Rng,
}

impl QueueFixture {
    fn new() -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut queue = LocalQueue::new();
        let keys: Vec<QueueKey> = (0..QUEUED).map(|t| key(t, rng.next_u64())).collect();
        for &k in &keys {
            queue.insert(k);
        }
        QueueFixture {
            queue,
            keys,
            next_join: QUEUED,
            rng,
        }
    }

    /// Times `op` on each of `inputs`, then runs `undo` on them untimed.
    fn timed_batches<T: Copy>(
        &mut self,
        iters: u64,
        mut input: impl FnMut(&mut Self) -> T,
        mut op: impl FnMut(&mut LocalQueue, T),
        mut undo: impl FnMut(&mut Self, T),
    ) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = iters;
        let mut inputs = Vec::with_capacity(BATCH as usize);
        while left > 0 {
            let n = left.min(BATCH);
            inputs.clear();
            inputs.extend((0..n).map(|_| input(self)));
            let start = clock();
            for &item in &inputs {
                op(&mut self.queue, item);
            }
            total += clock() - start;
            for &item in &inputs {
                undo(self, item);
            }
            left -= n;
        }
        total
    }

    fn random_existing(&mut self) -> QueueKey {
        self.keys[self.rng.random_range(0..self.keys.len())]
    }
}

fn queue_benches(c: &mut Criterion) {
    let mut fixture: Option<QueueFixture> = None;
    let mut group = c.benchmark_group("queue");
    group.throughput(Throughput::Elements(1));
    bench_insert(&mut group, &mut fixture);
    bench_remove(&mut group, &mut fixture);
    bench_rank(&mut group, &mut fixture);
    // Last: it replaces the fixture's keys, which `remove` and `rank` draw from.
    bench_pop_min(&mut group, &mut fixture);
    group.finish();
}

/// The benchmark group the queue's operations are timed in.
type Group<'a> = BenchmarkGroup<'a, WallTime>;

/// `insert/append` and `insert/middle`.
fn bench_insert(group: &mut Group<'_>, fixture: &mut Option<QueueFixture>) {
    // Inserting after every queued key (a new joiner) and among them (a re-queued visitor).
    let appended: fn(&mut QueueFixture) -> QueueKey = |f| {
        f.next_join += 1;
        key(f.next_join, f.rng.next_u64())
    };
    let among: fn(&mut QueueFixture) -> QueueKey =
        |f| key(f.rng.random_range(0..QUEUED), f.rng.next_u64());
    for (name, new_key) in [("insert/append", appended), ("insert/middle", among)] {
        group.bench_function(name, |b| {
            let f = fixture.get_or_insert_with(QueueFixture::new);
            b.iter_custom(|iters| {
                f.timed_batches(
                    iters,
                    new_key,
                    |q, k| {
                        black_box(q.insert(k));
                    },
                    |f, k| {
                        f.queue.remove(k.ticket);
                    },
                )
            })
        });
    }
}

/// `remove` of a queued ticket.
fn bench_remove(group: &mut Group<'_>, fixture: &mut Option<QueueFixture>) {
    group.bench_function("remove", |b| {
        let f = fixture.get_or_insert_with(QueueFixture::new);
        b.iter_custom(|iters| {
            // Distinct tickets, so every timed removal finds its entry.
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(BATCH);
                let mut batch: Vec<QueueKey> = (0..n).map(|_| f.random_existing()).collect();
                batch.sort_unstable();
                batch.dedup();
                batch.shuffle(&mut f.rng);
                let start = clock();
                for k in &batch {
                    black_box(f.queue.remove(k.ticket));
                }
                total += clock() - start;
                for &k in &batch {
                    f.queue.insert(k);
                }
                left -= n;
            }
            total
        })
    });
}

/// `rank` of a queued key or of one that is not queued, half and half.
fn bench_rank(group: &mut Group<'_>, fixture: &mut Option<QueueFixture>) {
    group.bench_function("rank", |b| {
        let f = fixture.get_or_insert_with(QueueFixture::new);
        b.iter_custom(|iters| {
            f.timed_batches(
                iters,
                |f| {
                    if f.rng.random_range(0..2) == 0 {
                        f.random_existing()
                    } else {
                        key(f.rng.random_range(0..QUEUED), f.rng.next_u64())
                    }
                },
                |q, k| {
                    black_box(q.rank(&k));
                },
                |_, _| {},
            )
        })
    });
}

/// `pop_min`, each popped key replaced by a newcomer's.
fn bench_pop_min(group: &mut Group<'_>, fixture: &mut Option<QueueFixture>) {
    group.bench_function("pop_min", |b| {
        let f = fixture.get_or_insert_with(QueueFixture::new);
        b.iter_custom(|iters| {
            f.timed_batches(
                iters,
                |_| (),
                |q, ()| {
                    black_box(q.pop_min());
                },
                |f, ()| {
                    f.next_join += 1;
                    let k = key(f.next_join, f.rng.next_u64());
                    f.queue.insert(k);
                },
            )
        })
    });
}
/// A room with a million visitors queued and, after warming up, as many who left recently and
/// are still remembered, the state a busy node sits in.
///
/// One cycle is the work one visitor brings over their stay, done in steady state:
/// a newcomer joins at the back; the visitor at the head checks in (position 1); an eviction
/// round admits them (`target_on_site` is 1 and `pass_expiry_ms` is 0, so the site is free again
/// once they leave); they leave with a pass; and a cleanup sweep runs. The clock advances 1 ms
/// per cycle, and a ticket lives 1.2 million ms, just longer than a visitor waits, so every
/// check-in is valid and every record is eventually swept.
struct EngineFixture {
    room: WaitingRoom,
    tickets: VecDeque<Ticket>,
    now: Time,
}

impl EngineFixture {
    fn settings() -> Settings {
        Settings {
            target_on_site: 1,
            admit_straight_through: false,
            pass_expiry_ms: 0,
            ticket_expiry_ms: 1_200_000,
            ..Settings::default()
        }
    }

    fn new() -> Self {
        let mut room = WaitingRoom::new(Self::settings(), NodeId(1), 7).unwrap();
        let tickets = (0..QUEUED).map(|now| room.join(now).ticket).collect();
        let mut fixture = EngineFixture {
            room,
            tickets,
            now: QUEUED,
        };
        // Until the first visitors are forgotten the room only grows; time the steady state.
        for _ in 0..Self::settings().ticket_expiry_ms + QUEUED / 10 {
            fixture.cycle();
        }
        fixture
    }

    fn cycle(&mut self) {
        let now = self.now;
        self.now += 1;
        let newcomer = self.room.join(now);
        self.tickets.push_back(newcomer.ticket);
        let head = self.tickets.pop_front().expect("queue is never empty");
        let check_in = self
            .room
            .check_in(now, &head)
            .expect("head ticket is valid");
        assert_eq!(check_in.status, CheckInStatus::Queued { position: 1 });
        let admitted = self.room.evict(now);
        assert_eq!(admitted, [head.id]);
        black_box(
            self.room
                .leave(now, &check_in.ticket)
                .expect("head was admitted"),
        );
        self.room.cleanup(now);
    }
}

fn engine_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    let mut fixture: Option<EngineFixture> = None;
    group.bench_function("join_checkin_leave", |b| {
        let f = fixture.get_or_insert_with(|| {
            let start = Instant::now();
            let f = EngineFixture::new();
            eprintln!(
                "engine fixture: {} queued, built and warmed up in {:.1?}",
                f.room.queued(),
                start.elapsed()
            );
            f
        });
        b.iter_custom(|iters| {
            let start = clock();
            for _ in 0..iters {
                f.cycle();
            }
            clock() - start
        });
        assert_eq!(f.room.queued(), QUEUED);
    });
    group.finish();
}

/// Heap bytes a value built by `build` holds, per queued visitor.
fn bytes_per_visitor<T>(build: impl FnOnce() -> T) -> (f64, T) {
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let value = build();
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    ((after - before) as f64 / QUEUED as f64, value)
}

fn report_memory() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (appended, queue) = bytes_per_visitor(|| {
        let mut queue = LocalQueue::new();
        for t in 0..QUEUED {
            queue.insert(key(t, rng.next_u64()));
        }
        queue
    });
    drop(queue);
    let (shuffled, queue) = bytes_per_visitor(|| {
        let mut queue = LocalQueue::new();
        for _ in 0..QUEUED {
            queue.insert(key(rng.random_range(0..QUEUED), rng.next_u64()));
        }
        queue
    });
    drop(queue);
    let (room_bytes, room) = bytes_per_visitor(|| {
        let mut room = WaitingRoom::new(EngineFixture::settings(), NodeId(1), 7).unwrap();
        for now in 0..QUEUED {
            room.join(now);
        }
        room
    });
    assert_eq!(room.queued(), QUEUED);
    drop(room);
    eprintln!(
        "memory with {QUEUED} queued (heap bytes requested per visitor):\n  \
         LocalQueue, joined in time order: {appended:.1}\n  \
         LocalQueue, joined in random order: {shuffled:.1}\n  \
         WaitingRoom, all joined and queued: {room_bytes:.1}"
    );
}

fn memory(c: &mut Criterion) {
    let mut reported = false;
    let mut group = c.benchmark_group("memory");
    // Only the printed figures matter; the timed part is a placeholder.
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(10))
        .measurement_time(Duration::from_millis(10));
    group.bench_function("report", |b| {
        if !reported {
            report_memory();
            reported = true;
        }
        b.iter(|| ());
    });
    group.finish();
}

criterion_group!(benches, memory, queue_benches, engine_benches);
criterion_main!(benches);
