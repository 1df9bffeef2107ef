use super::*;
use proptest::prelude::*;

fn msg(frames: &[&[u8]]) -> Message {
    frames.iter().map(|f| Bytes::copy_from_slice(f)).collect()
}

#[test]
fn round_trip_keeps_frames_and_alignment() {
    let input = vec![msg(&[b"header", b"x"]), msg(&[b""]), msg(&[&[7u8; 13]])];
    let buf = Bytes::from(encode_to_vec(&input).unwrap());
    let out = decode(&buf).unwrap();
    assert_eq!(out, input);
    for m in &out {
        for f in m.frames() {
            assert_eq!((f.as_ptr() as usize - buf.as_ptr() as usize) % 8, 0, "frame data 8-aligned");
        }
    }
}

#[test]
fn writer_refuses_what_does_not_fit_and_counts() {
    let mut space = vec![0u8; HEADER_LEN + 8 + 8 + 8];
    let mut w = BufferWriter::new(&mut space);
    assert!(w.push(&msg(&[b"12345678"])));
    assert!(!w.push(&msg(&[b"1"])));
    assert_eq!(w.message_count(), 1);
    assert_eq!(w.finish(), 40);
}

#[test]
fn a_sealed_loan_decodes_as_one_frame_in_place() {
    for len in [0usize, 1, 7, 8, 100] {
        let mut buf = vec![0xAAu8; 256];
        buf[LOAN_OFFSET..LOAN_OFFSET + len].fill(7);
        let n = seal_loan(&mut buf, len);
        buf.truncate(n);
        let expected = encode_to_vec(&[msg(&[&vec![7u8; len]])]).unwrap();
        assert_eq!(buf, expected, "a loan is byte-for-byte the encoding of the same message");
    }
    assert_eq!(max_loan(256), 224);
}

#[test]
fn check_postable_rejects_oversized_and_empty() {
    let big = msg(&[&[0u8; 100]]);
    assert_eq!(check_postable(&big, 64), Err(Error::MessageTooLarge { size: 8 + 8 + 104, max: 48 }));
    assert!(matches!(check_postable(&Message::default(), 64), Err(Error::InvalidOption(_))));
    assert_eq!(check_postable(&msg(&[b"abc"]), 64), Ok(24));
}

#[test]
fn decoder_names_what_is_wrong() {
    let good = encode_to_vec(&[msg(&[b"abc"])]).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..10].to_vec(), "shorter than its header"),
        ({ let mut b = good.clone(); b[0] = b'X'; b }, "bad magic"),
        ({ let mut b = good.clone(); b[4] = 9; b }, "wire version 9"),
        ({ let mut b = good.clone(); b[8] = 0; b }, "message count 0"),
        ({ let mut b = good.clone(); b[12] = 200; b }, "body length"),
        ({ let mut b = good.clone(); b[24] = 200; b }, "overruns"),
        ({ let mut b = good.clone(); b.extend_from_slice(&[0; 8]); b[12] += 8; b }, "trailing"),
    ];
    for (bytes, want) in cases {
        let err = decode(&Bytes::from(bytes)).unwrap_err();
        assert!(matches!(&err, Error::Protocol(w) if w.contains(want)), "{err} should mention {want}");
    }
}

/// The golden vectors pin the format; tests/test_wire.py checks the same file from Python.
#[test]
fn golden_vectors() {
    let text = include_str!("../../../../tests/golden/wire_v1.tsv");
    let mut n = 0;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 3, "bad golden line {line}");
        let messages: Vec<Message> = cols[1]
            .split(';')
            .map(|m| m.split(',').map(|f| Bytes::from(unhex(if f == "-" { "" } else { f }))).collect())
            .collect();
        let expected = unhex(cols[2]);
        assert_eq!(encode_to_vec(&messages).unwrap(), expected, "encoding of {}", cols[0]);
        assert_eq!(decode(&Bytes::from(expected)).unwrap(), messages, "decoding of {}", cols[0]);
        n += 1;
    }
    assert!(n >= 4, "golden file has too few vectors");
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn arb_messages() -> impl Strategy<Value = Vec<Message>> {
    let frame = prop::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from);
    let message = prop::collection::vec(frame, 1..4).prop_map(Message::new);
    prop::collection::vec(message, 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn encode_decode_round_trip(messages in arb_messages()) {
        let buf = Bytes::from(encode_to_vec(&messages).unwrap());
        prop_assert_eq!(decode(&buf).unwrap(), messages);
    }

    /// Hostile input: random bytes are either decoded or refused with a ProtocolError, never a panic.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        match decode(&Bytes::from(bytes)) {
            Ok(ms) => prop_assert!(!ms.is_empty()),
            Err(e) => prop_assert!(matches!(e, Error::Protocol(_))),
        }
    }

    /// Mutated valid buffers: flips, truncations and extensions give the right messages or an error.
    #[test]
    fn mutated_buffers_decode_or_refuse(
        messages in arb_messages(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = encode_to_vec(&messages).unwrap();
        for (at, v) in flips {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let total = bytes.len();
        match decode(&Bytes::from(bytes)) {
            Ok(ms) => {
                let sum: usize = ms.iter().map(|m| m.nbytes()).sum();
                prop_assert!(sum <= total);
            }
            Err(e) => prop_assert!(matches!(e, Error::Protocol(_))),
        }
    }
}
