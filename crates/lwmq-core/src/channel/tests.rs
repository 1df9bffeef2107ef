use super::*;
use crate::transport::{self, Options};
use bytes::Bytes;

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A connected pair over inproc with the given options on both sides.
fn pair(options: Options) -> (Channel, Channel) {
    let uri = format!("inproc://channel-test-{}", NEXT.fetch_add(1, Relaxed));
    let listener = transport::listen(&uri, &options).unwrap();
    let a = transport::connect(&uri, &options, Some(Instant::now() + Duration::from_secs(5))).unwrap();
    let b = listener.accept(Some(Instant::now() + Duration::from_secs(5))).unwrap();
    (Channel::new(a, &options).unwrap(), Channel::new(b, &options).unwrap())
}

fn soon() -> Deadline {
    Some(Instant::now() + Duration::from_secs(5))
}

fn num(i: u32) -> Message {
    Message::single(Bytes::copy_from_slice(&i.to_le_bytes()))
}

fn val(m: &Message) -> u32 {
    u32::from_le_bytes(m.frames()[0][..4].try_into().unwrap())
}

#[test]
fn lone_message_ships_at_once() {
    let (a, b) = pair(Options::default());
    a.send(num(7), soon()).unwrap();
    // Shipped by the send call itself: nothing is left queued and no thread had to run.
    let s = a.stats();
    assert_eq!((s.messages_sent, s.buffers_sent, s.queued), (1, 1, 0));
    assert!(a.shared.flusher.lock().unwrap().is_none(), "no flusher thread when a buffer was free");
    assert_eq!(val(&b.recv(soon()).unwrap()), 7);
}

#[test]
fn clubbing_under_load_keeps_order() {
    let options = Options { send_buffers: Some(2), buffer_size: Some(4096), ..Options::default() };
    let (a, b) = pair(options);
    let n = 20_000u32;
    let receiver = std::thread::spawn(move || {
        for i in 0..n {
            assert_eq!(val(&b.recv(soon()).unwrap()), i);
        }
        b
    });
    for i in 0..n {
        a.send(num(i), soon()).unwrap();
    }
    let b = receiver.join().unwrap();
    let s = a.stats();
    assert_eq!(s.messages_sent, n as u64);
    assert!(s.buffers_sent < n as u64, "some messages were clubbed: {s:?}");
    assert_eq!(b.stats().messages_received, n as u64);
}

#[test]
fn send_many_clubs_and_rejects_oversized_first() {
    let options = Options { buffer_size: Some(1024), ..Options::default() };
    let (a, b) = pair(options);
    let too_big = Message::single(vec![0u8; 2000]);
    let err = a.send_many(vec![num(1), too_big], soon()).unwrap_err();
    assert!(matches!(err.0, Error::MessageTooLarge { .. }));
    assert_eq!(a.stats().messages_sent, 0, "nothing sent when one message is too large");
    a.send_many((0..100).map(num).collect(), soon()).unwrap();
    let got = b.recv_many(1000, soon()).unwrap();
    assert!(!got.is_empty());
    assert!(a.stats().buffers_sent < 100);
}

#[test]
fn multi_frame_messages_arrive_whole() {
    let (a, b) = pair(Options::default());
    let m: Message = [&b"key"[..], b"", &[9u8; 1000][..]].into_iter().map(Bytes::copy_from_slice).collect();
    a.send(m.clone(), soon()).unwrap();
    assert_eq!(b.recv(soon()).unwrap(), m);
}

#[test]
fn peer_close_gives_peer_gone_after_draining() {
    let (a, b) = pair(Options::default());
    a.send(num(1), soon()).unwrap();
    a.send(num(2), soon()).unwrap();
    a.close(None);
    assert_eq!(val(&b.recv(soon()).unwrap()), 1);
    assert_eq!(val(&b.recv(soon()).unwrap()), 2);
    assert!(matches!(b.recv(soon()), Err(Error::PeerGone(_))));
    assert!(matches!(b.send(num(3), soon()).map_err(|e| e.error), Err(Error::PeerGone(_))));
    assert!(matches!(a.recv(soon()), Err(Error::ChannelClosed)));
}

#[test]
fn receive_times_out() {
    let (_a, b) = pair(Options::default());
    assert!(matches!(b.recv(Some(Instant::now() + Duration::from_millis(10))), Err(Error::Timeout(_))));
    assert!(b.try_recv().unwrap().is_none());
}

#[test]
fn close_ships_the_backlog_within_linger() {
    let options = Options { send_buffers: Some(1), buffer_size: Some(256), ..Options::default() };
    let (a, b) = pair(options);
    let q = a.queue("low", Producers::One).unwrap();
    for i in 0..200 {
        a.post(&q, num(i), soon()).unwrap();
    }
    let reader = std::thread::spawn(move || (0..200).map(|_| val(&b.recv(soon()).unwrap())).collect::<Vec<_>>());
    a.close(Some(Duration::from_secs(5)));
    assert_eq!(reader.join().unwrap(), (0..200).collect::<Vec<_>>());
    assert_eq!(a.stats().unsent_at_close, 0);
}

#[test]
fn zero_copy_views_keep_their_buffer_until_dropped() {
    let options = Options { send_buffers: Some(8), buffer_size: Some(256), ..Options::default() };
    let (a, b) = pair(options);
    a.send(num(1), soon()).unwrap();
    let held = b.recv(soon()).unwrap();
    let address = held.frames()[0].as_ptr();
    for i in 2..200 {
        a.send(num(i), soon()).unwrap();
        assert_eq!(val(&b.recv(soon()).unwrap()), i);
    }
    // The held view still points into its transport buffer, which was never handed out again.
    assert_eq!(held.frames()[0].as_ptr(), address);
    assert_eq!(val(&held), 1);
    assert_eq!(b.stats().copied_out, 0, "one held buffer of eight is no pressure");
}

#[test]
fn holding_received_messages_never_starves_the_sender() {
    let options = Options { send_buffers: Some(4), buffer_size: Some(256), ..Options::default() };
    let (a, b) = pair(options);
    let sender = std::thread::spawn(move || {
        for i in 0..100 {
            a.send(num(i), soon()).unwrap();
            std::thread::sleep(Duration::from_micros(200)); // one message per buffer
        }
        a
    });
    // Keep every message: the first buffers stay pinned, the rest are copied out and freed.
    let kept: Vec<Message> = (0..100).map(|_| b.recv(soon()).unwrap()).collect();
    assert_eq!(kept.iter().map(val).collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
    assert!(b.stats().copied_out > 0);
    drop(sender.join().unwrap());
}

#[test]
fn a_loan_ships_in_place_after_what_was_queued() {
    let (a, b) = pair(Options { buffer_size: Some(4096), ..Options::default() });
    a.send(num(1), soon()).unwrap();
    let mut loan = a.loan(100, soon()).unwrap();
    loan.data()[..4].copy_from_slice(&2u32.to_le_bytes());
    loan.ship(4).unwrap();
    assert_eq!(val(&b.recv(soon()).unwrap()), 1);
    assert_eq!(val(&b.recv(soon()).unwrap()), 2);
    assert!(matches!(a.loan(5000, soon()), Err(Error::MessageTooLarge { .. })));
    drop(a.loan(10, soon()).unwrap()); // given back unshipped: nothing is sent
    a.send(num(3), soon()).unwrap();
    assert_eq!(val(&b.recv(soon()).unwrap()), 3);
}

#[test]
fn direct_sends_club_and_stop_when_no_buffer_is_free() {
    let (a, b) = pair(Options { buffer_size: Some(256), send_buffers: Some(2), ..Options::default() });
    let payloads: Vec<[u8; 4]> = (0..100u32).map(|i| i.to_le_bytes()).collect();
    let messages: Vec<[&[u8]; 1]> = payloads.iter().map(|p| [&p[..]]).collect();
    let refs: Vec<&[&[u8]]> = messages.iter().map(|m| &m[..]).collect();
    let sent = a.send_direct(&refs).unwrap();
    assert!(sent > 2 && sent < 100, "two buffers' worth went direct: {sent}");
    assert_eq!(a.stats().buffers_sent, 2);
    for i in 0..sent as u32 {
        assert_eq!(val(&b.recv(soon()).unwrap()), i);
    }
    // Something queued ahead: the direct path steps aside so order holds.
    let (c, _d) = pair(Options { buffer_size: Some(256), send_buffers: Some(1), ..Options::default() });
    let filling = Message::single(Bytes::from(vec![7u8; 200]));
    c.send(filling.clone(), soon()).unwrap(); // fills the only buffer
    c.send(filling, soon()).unwrap(); // no buffer: queued
    assert_eq!(c.send_direct(&refs[..1]).unwrap(), 0);
    let too_big = [vec![0u8; 1000]];
    assert!(matches!(a.send_direct(&[&too_big[..]]), Err(Error::MessageTooLarge { .. })));
}

#[test]
fn messages_sent_one_by_one_grow_the_buffer_the_peer_has_not_taken() {
    let (a, b) = pair(Options { buffer_size: Some(4096), send_buffers: Some(8), ..Options::default() });
    let payloads: Vec<[u8; 4]> = (0..50u32).map(|i| i.to_le_bytes()).collect();
    for p in &payloads {
        assert_eq!(a.send_direct(&[&[&p[..]][..]]).unwrap(), 1); // the binding's path for `send`
    }
    for i in 50..100 {
        a.send(num(i), soon()).unwrap(); // the queued path
    }
    let s = a.stats();
    assert_eq!((s.messages_sent, s.buffers_sent, s.appended), (100, 1, 99), "{s:?}");
    for i in 0..100 {
        assert_eq!(val(&b.recv(soon()).unwrap()), i);
    }
    assert_eq!(b.stats().buffers_received, 1);
    // The peer has taken that buffer: the next message starts a new one.
    a.send(num(100), soon()).unwrap();
    assert_eq!(a.stats().buffers_sent, 2);
    assert_eq!(val(&b.recv(soon()).unwrap()), 100);
}

#[test]
fn try_loan_never_waits() {
    let (a, b) = pair(Options { buffer_size: Some(4096), send_buffers: Some(1), ..Options::default() });
    let mut held = a.try_loan(100).unwrap().expect("a free buffer");
    assert!(a.try_loan(100).unwrap().is_none(), "the only buffer is lent");
    assert!(matches!(a.try_loan(5000), Err(Error::MessageTooLarge { .. })));
    held.data()[..4].copy_from_slice(&7u32.to_le_bytes());
    held.ship(4).unwrap();
    assert_eq!(val(&b.recv(soon()).unwrap()), 7);
}

#[test]
fn unknown_group_is_an_invalid_option() {
    let (a, _b) = pair(Options::default());
    assert!(matches!(a.queue("urgent", Producers::One), Err(Error::InvalidOption(_))));
}
