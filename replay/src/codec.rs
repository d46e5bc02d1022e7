//! Journal payloads: one rkyv-encoded `Stamped` command per record, with the
//! command's kind in the record header so tools can filter without decoding.

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;
use sequencer::Stamped;

/// A payload that is not a valid encoded command.
#[derive(Debug, thiserror::Error)]
#[error("record {seq}: payload does not decode as a command: {reason}")]
pub struct DecodeError {
    pub seq: u64,
    pub reason: String,
}

/// Encodes a stamped command.
pub fn encode(stamped: &Stamped) -> AlignedVec {
    rkyv::to_bytes::<RkyvError>(stamped).expect("encoding into memory cannot fail")
}

/// Encodes into a reused buffer (no allocation once it has grown).
pub fn encode_into(stamped: &Stamped, buffer: AlignedVec) -> AlignedVec {
    let mut buffer = buffer;
    buffer.clear();
    rkyv::api::high::to_bytes_in::<_, RkyvError>(stamped, buffer)
        .expect("encoding into memory cannot fail")
}

/// Decodes and validates a payload. `bytes` must be 16-byte aligned, as the
/// journal's payloads are. `seq` is the record's, checked against the stamp.
pub fn decode(seq: u64, bytes: &[u8]) -> Result<Stamped, DecodeError> {
    let stamped = if (bytes.as_ptr() as usize).is_multiple_of(16) {
        rkyv::from_bytes::<Stamped, RkyvError>(bytes)
    } else {
        // Copy into an aligned buffer (only when called on a plain slice).
        let mut aligned = AlignedVec::<16>::with_capacity(bytes.len());
        aligned.extend_from_slice(bytes);
        rkyv::from_bytes::<Stamped, RkyvError>(&aligned)
    }
    .map_err(|e| DecodeError {
        seq,
        reason: e.to_string(),
    })?;
    if stamped.seq != seq {
        return Err(DecodeError {
            seq,
            reason: format!("stamped seq {} differs from the record's", stamped.seq),
        });
    }
    Ok(stamped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sequencer::Command;

    #[test]
    fn round_trip_and_refusal_of_garbage() {
        let stamped = Stamped {
            seq: 7,
            ts_ms: 1_795_294_800_000,
            command: Command::Price {
                symbol: "X:BTCUSD".into(),
                price_e8: 42,
                t_ms: 3,
            },
        };
        let bytes = encode(&stamped);
        assert_eq!(decode(7, &bytes).unwrap(), stamped);
        assert!(decode(8, &bytes).is_err());
        let mut garbage = AlignedVec::<16>::new();
        garbage.extend_from_slice(&[0xffu8; 64]);
        assert!(decode(7, &garbage).is_err());
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        // A flipped byte either fails validation or decodes to something else;
        // never a panic. (The journal's CRC is what catches damage.)
        let _ = decode(7, &flipped);
    }
}
