//! In-process tests of the bus (one process, several threads); tests/test_bus.py runs the multi-process
//! ones (kills, many publishers and subscribers, no leftovers).

use super::*;

fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t-{name}-{}-{}", std::process::id(), N.fetch_add(1, Relaxed))
}

fn options(capacity: u32, backpressure: bool) -> BusOptions {
    BusOptions { capacity: Some(capacity), max_message_size: Some(256), backpressure: Some(backpressure), ..Default::default() }
}

fn soon() -> Deadline {
    Some(Instant::now() + Duration::from_secs(5))
}

#[test]
fn publishes_in_order_with_topics_and_frames() {
    let name = unique("order");
    let bus = Bus::join(&name, &options(64, false)).unwrap();
    assert!(bus.created());
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let all = TopicFilter::default();
    let only_a = TopicFilter { exact: vec![b"a".to_vec()], prefixes: vec![b"md.".to_vec()] };
    let mut sub_all = Subscriber::join(bus.clone(), all, Start::Latest, &BusOptions::default()).unwrap();
    let mut sub_a = Subscriber::join(bus.clone(), only_a, Start::Latest, &BusOptions::default()).unwrap();
    for (i, topic) in [&b"a"[..], b"b", b"md.x", b"ab", b"a"].iter().enumerate() {
        let s = publisher.publish(topic, &[b"head", &[i as u8; 20]], None).unwrap();
        assert_eq!(s, i as u64);
    }
    let got: Vec<_> = (0..5).map(|_| sub_all.recv(soon()).unwrap()).collect();
    assert_eq!(got.iter().map(|d| d.seq).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    assert_eq!(&got[2].topic[..], b"md.x");
    assert_eq!(got[2].message.frames().len(), 2);
    assert_eq!(&got[2].message.frames()[1][..], &[2u8; 20][..]);
    assert_eq!(got[0].publisher, publisher.id);
    let filtered = sub_a.recv_many(10, soon()).unwrap();
    assert_eq!(filtered.iter().map(|d| d.seq).collect::<Vec<_>>(), vec![0, 2, 4]);
    assert!(matches!(sub_all.recv(Some(Instant::now())), Err(Error::Timeout(_))));
}

#[test]
fn an_overrun_subscriber_learns_exactly_how_many_it_lost() {
    let name = unique("lost");
    let bus = Bus::join(&name, &options(8, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    for i in 0..20u64 {
        publisher.publish(b"t", &[&i.to_le_bytes()], None).unwrap();
    }
    // Sequences 0..12 were overwritten (capacity 8, tail 20): the first delivery is 12 and reports 12 lost.
    let d = sub.recv(soon()).unwrap();
    assert_eq!((d.seq, d.lost, sub.lost), (12, 12, 12));
    let rest = sub.recv_many(100, soon()).unwrap();
    assert_eq!(rest.len(), 7);
    assert!(rest.iter().all(|d| d.lost == 0));
    // Replay from a sequence no longer retained reports the gap; from one still there, delivers it.
    let mut old = Subscriber::join(bus.clone(), TopicFilter::default(), Start::At(3), &BusOptions::default()).unwrap();
    let d = old.recv(soon()).unwrap();
    assert_eq!((d.seq, d.lost), (12, 9));
    let mut oldest = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Oldest, &BusOptions::default()).unwrap();
    assert_eq!(oldest.recv(soon()).unwrap().seq, 12);
}

#[test]
fn backpressure_holds_publishers_for_the_slowest_subscriber() {
    let name = unique("bp");
    let bus = Bus::join(&name, &options(4, true)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    for _ in 0..4 {
        publisher.publish(b"t", &[b"x"], Some(Instant::now())).unwrap();
    }
    let full = publisher.publish(b"t", &[b"x"], Some(Instant::now() + Duration::from_millis(20)));
    assert!(matches!(full, Err(Error::Timeout(_))), "{full:?}");
    assert_eq!(sub.recv(soon()).unwrap().seq, 0);
    assert_eq!(publisher.publish(b"t", &[b"x"], Some(Instant::now())).unwrap(), 4);
    // A blocked publisher resumes as soon as the subscriber leaves.
    let p = std::thread::spawn(move || publisher.publish(b"t", &[b"x"], soon()));
    std::thread::sleep(Duration::from_millis(20));
    sub.close();
    assert_eq!(p.join().unwrap().unwrap(), 5);
    assert!(matches!(sub.recv(None), Err(Error::ChannelClosed)));
}

#[test]
fn a_joiner_asking_for_another_shape_is_refused() {
    let name = unique("shape");
    let _bus = Bus::join(&name, &options(64, false)).unwrap();
    let e = Bus::join(&name, &options(128, false)).err().unwrap();
    assert!(matches!(&e, Error::Mismatch(m) if m.contains("capacity 64 (asked 128)")), "{e}");
    let e = Bus::join(&name, &options(64, true)).err().unwrap();
    assert!(matches!(&e, Error::Mismatch(m) if m.contains("backpressure")), "{e}");
    assert!(Bus::join(&name, &BusOptions::default()).is_ok());
}

#[test]
fn a_lock_holder_that_dies_is_recovered_and_its_torn_slot_never_delivered() {
    let name = unique("dead");
    let bus = Bus::join(&name, &options(16, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    publisher.publish(b"t", &[b"first"], None).unwrap();
    // A thread takes the lock, starts writing sequence 1 and exits holding it: the kernel marks the
    // robust mutex owner-dead, exactly as for a killed process.
    let b = bus.clone();
    std::thread::spawn(move || {
        let guard = b.seg.lock.lock(None).unwrap().unwrap();
        b.seg.slot(1).0.stamp.store(seqlock::whole(1) - 1, Relaxed);
        std::mem::forget(guard);
    })
    .join()
    .unwrap();
    assert_eq!(bus.info().lock, "recovered");
    assert_eq!(publisher.publish(b"t", &[b"second"], Some(Instant::now())).unwrap(), 1);
    let got = sub.recv_many(10, soon()).unwrap();
    assert_eq!(got.iter().map(|d| &d.message.frames()[0][..]).collect::<Vec<_>>(), vec![&b"first"[..], b"second"]);
    assert_eq!((bus.info().recoveries, bus.info().lock), (1, "free"));
}

#[test]
fn oversized_and_empty_messages_are_refused() {
    let bus = Bus::join(&unique("big"), &options(4, false)).unwrap();
    let publisher = Publisher::new(bus, &BusOptions::default());
    assert!(matches!(publisher.publish(b"t", &[&[0u8; 300]], None), Err(Error::MessageTooLarge { .. })));
    assert!(matches!(publisher.publish(b"t", &[], None), Err(Error::InvalidOption(_))));
}

#[test]
fn names_are_checked() {
    assert_eq!(parse_uri("bus://ticks.v1").unwrap(), "ticks.v1");
    for bad in ["bus://", "bus://a/b", "ipc://x", "bus://a b", &format!("bus://{}", "x".repeat(65))] {
        assert!(matches!(parse_uri(bad), Err(Error::Address(_))), "{bad}");
    }
}

#[test]
fn corrupt_slot_lengths_are_a_protocol_error_not_a_crash() {
    let bus = Bus::join(&unique("corrupt"), &options(4, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    publisher.publish(b"t", &[b"x"], None).unwrap();
    publisher.publish(b"t", &[b"y"], None).unwrap();
    bus.seg.slot(0).0.len.store(u32::MAX, Relaxed);
    assert!(matches!(sub.recv(soon()), Err(Error::Protocol(_))));
    assert_eq!(&sub.recv(soon()).unwrap().message.frames()[0][..], b"y");
}

#[test]
fn a_record_left_reserved_by_a_dead_joiner_is_reclaimed_when_the_table_is_full() {
    let bus = Bus::join(&unique("full"), &options(8, false)).unwrap();
    let join = || Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default());
    let mut subs: Vec<_> = (0..MAX_MEMBERS).map(|_| join().unwrap()).collect();
    assert!(matches!(join(), Err(Error::InvalidOption(m)) if m.contains("256 subscribers")));
    // A joiner died between reserving record 0 and publishing itself: its pid is gone.
    let mut first = subs.remove(0);
    first.close();
    bus.seg.member(0).owner.store(RESERVED | (u32::MAX as u64 - 1), Relaxed);
    assert_eq!(bus.info().subscribers, MAX_MEMBERS - 1);
    let again = join().unwrap();
    assert_eq!((again.member, bus.info().subscribers), (0, MAX_MEMBERS));
}

#[test]
fn columns_carry_every_field_and_make_the_same_deliveries() {
    let bus = Bus::join(&unique("cols"), &options(64, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let only = TopicFilter { exact: vec![], prefixes: vec![b"md.".to_vec()] };
    let mut sub = Subscriber::join(bus.clone(), only, Start::Latest, &BusOptions::default()).unwrap();
    assert!(matches!(sub.recv_columns(16, Some(Instant::now())), Err(Error::Timeout(_))));
    for (i, topic) in [&b"md.a"[..], b"x", b"md.bbbbbbbbb", b"md.c"].iter().enumerate() {
        publisher.publish(topic, &[b"head", &vec![i as u8; i * 7]], None).unwrap();
    }
    let got = sub.recv_columns(16, soon()).unwrap();
    assert_eq!(got.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![0, 2, 3]);
    assert_eq!(got.entries.iter().map(|e| e.nbytes).collect::<Vec<_>>(), vec![4, 4 + 14, 4 + 21]);
    assert_eq!(got.topic(1), b"md.bbbbbbbbb");
    assert!(got.entries.iter().all(|e| e.publisher == publisher.id && e.lost == 0 && e.offset % 8 == 0));
    let d = got.delivery(2).unwrap();
    assert_eq!((d.seq, &d.topic[..], d.message.frames().len()), (3, &b"md.c"[..], 2));
    assert_eq!(&d.message.frames()[1][..], &[3u8; 21][..]);
}

#[test]
fn columns_count_losses_and_stop_at_max() {
    let bus = Bus::join(&unique("colslost"), &options(8, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    for i in 0..20u64 {
        publisher.publish(b"t", &[&i.to_le_bytes()], None).unwrap();
    }
    let first = sub.recv_columns(3, soon()).unwrap();
    assert_eq!(first.entries.iter().map(|e| (e.seq, e.lost)).collect::<Vec<_>>(), vec![(12, 12), (13, 0), (14, 0)]);
    let rest = sub.recv_columns(100, soon()).unwrap();
    assert_eq!(rest.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), (15..20).collect::<Vec<_>>());
    assert_eq!(sub.lost, 12);
}

#[test]
fn a_corrupt_slot_in_the_middle_of_columns_ends_the_batch_and_is_the_next_calls_error() {
    let bus = Bus::join(&unique("colsbad"), &options(8, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    for frame in [&b"a"[..], b"b", b"c", b"d"] {
        publisher.publish(b"t", &[frame], None).unwrap();
    }
    bus.seg.slot(1).0.len.store(u32::MAX, Relaxed); // a length no message can have
    // SAFETY (test): slot 2's payload area; a frame length pointing past the message.
    unsafe { std::ptr::copy_nonoverlapping(u64::MAX.to_le_bytes().as_ptr(), bus.seg.slot(2).1.add(8), 8) };
    let got = sub.recv_columns(16, soon()).unwrap();
    assert_eq!(got.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![0]);
    assert!(matches!(sub.recv_columns(16, soon()), Err(Error::Protocol(m)) if m.contains("sequence 1")));
    assert!(matches!(sub.recv_columns(16, soon()), Err(Error::Protocol(m)) if m.contains("frame longer")));
    let last = sub.recv_columns(16, soon()).unwrap();
    assert_eq!((last.len(), &last.delivery(0).unwrap().message.frames()[0][..]), (1, &b"d"[..]));
}

#[test]
fn a_batch_kept_while_later_ones_are_received_never_changes() {
    let bus = Bus::join(&unique("colskeep"), &options(64, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    let mut kept = Vec::new();
    for round in 0..6u8 {
        for _ in 0..10 {
            publisher.publish(b"t", &[&[round; 40]], None).unwrap();
        }
        let got = sub.recv_columns(100, soon()).unwrap();
        if round % 2 == 0 {
            kept.push((round, got)); // every other batch kept: its buffer must not be reused under it
        }
    }
    for (round, got) in kept {
        assert_eq!(got.len(), 10);
        assert!((0..10).all(|i| got.delivery(i).unwrap().message.frames()[0][..] == [round; 40]));
    }
}

#[test]
fn a_dropped_batchs_buffer_is_reused_by_a_later_batch() {
    let bus = Bus::join(&unique("colsreuse"), &options(64, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    let mut batch = |n: usize| {
        for _ in 0..n {
            publisher.publish(b"t", &[&[7u8; 100]], None).unwrap();
        }
        sub.recv_columns(100, soon()).unwrap()
    };
    let first = batch(20);
    let (at, entries_at) = (first.data.as_ptr(), first.entries.as_ptr());
    let kept = first.delivery(3).unwrap(); // a delivery sliced from the batch keeps its buffer
    drop(first);
    let second = batch(20);
    assert_ne!(second.data.as_ptr(), at);
    assert_eq!(second.entries.as_ptr(), entries_at); // the records are free as soon as the batch is
    drop(kept);
    let third = batch(10);
    assert_eq!(third.data.as_ptr(), at); // the first buffer, once nothing referred to it
    assert!((0..10).all(|i| third.delivery(i).unwrap().message.frames()[0][..] == [7u8; 100]));
}

#[test]
fn a_batch_on_a_bus_of_big_slots_reserves_only_a_bounded_amount() {
    // 1 MiB slots (a sparse 1 GiB ring) and no limit on the batch: reserving a slot's size per message
    // up front would take a gigabyte for a thousand 4-byte messages.
    let big = BusOptions { capacity: Some(1024), max_message_size: Some(1 << 20), backpressure: Some(false), ..Default::default() };
    let bus = Bus::join(&unique("colsbig"), &big).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    for i in 0..1000u32 {
        publisher.publish(b"t", &[&i.to_le_bytes()], None).unwrap();
    }
    let got = sub.recv_columns(usize::MAX, soon()).unwrap();
    assert_eq!(got.len(), 1000);
    assert_eq!(&got.delivery(999).unwrap().message.frames()[0][..], &999u32.to_le_bytes()[..]);
    drop(got);
    let spares = sub.spares.lock().unwrap();
    assert!(spares.data[0].capacity() <= PRESIZE_BYTES, "{}", spares.data[0].capacity());
    assert!(spares.entries[0].capacity() <= PRESIZE_ENTRIES);
}

#[test]
fn a_receive_that_times_out_keeps_the_spare_buffers() {
    let bus = Bus::join(&unique("colsidle"), &options(64, false)).unwrap();
    let publisher = Publisher::new(bus.clone(), &BusOptions::default());
    let mut sub = Subscriber::join(bus.clone(), TopicFilter::default(), Start::Latest, &BusOptions::default()).unwrap();
    publisher.publish(b"t", &[&[1u8; 50]], None).unwrap();
    drop(sub.recv_columns(10, soon()).unwrap());
    let kept = |sub: &Subscriber| {
        let spares = sub.spares.lock().unwrap();
        (spares.data.len(), spares.entries.len())
    };
    assert_eq!(kept(&sub), (1, 1));
    // A first try without waiting finds nothing (the binding does this before every blocking receive):
    // the spares it took are kept, not freed (a freed buffer means fresh pages for the next batch).
    assert!(matches!(sub.recv_columns(10, Some(Instant::now())), Err(Error::Timeout(_))));
    assert_eq!(kept(&sub), (1, 1));
    publisher.publish(b"t", &[&[2u8; 50]], None).unwrap();
    assert_eq!(sub.recv_columns(10, soon()).unwrap().len(), 1);
}
