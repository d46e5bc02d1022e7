//! CRC-32 (the zlib/PNG variant the spec's checksum uses) as arithmetic,
//! so that a checksum can follow a change of a few bytes in place instead
//! of hashing its whole text again.
//!
//! A CRC is linear over GF(2): for two texts `a` and `b` of one length,
//! `crc(a) ^ crc(b)` is the pure remainder (`raw`: no initial value, no
//! final xor) of `a ^ b`. When `a` and `b` differ only in a window of bytes
//! followed by `k` more, that is `raw(window diff) * x^(8k) mod P`. So a
//! book level whose count is rewritten in place, keeping its number of
//! digits, changes the checksum by `shifted(raw(diff), k)`: a few table
//! steps and one carry-less multiply, against hashing up to 500 bytes.
//!
//! Pure arithmetic: the hardware multiply and the portable one give the
//! same bits (a test checks them against each other and against hashing).

/// The reflected CRC-32 polynomial (zlib, PNG).
const POLY: u32 = 0xEDB8_8320;

/// Bytes a change may be followed by: the longest checksum text (two sides
/// of ten levels of `0.XX:` and a 20-digit count, labels, commas) is 529.
pub const SHIFT_MAX: usize = 640;

/// The byte-at-a-time table: `TABLE[n]` is `n * x^32 mod P`, reflected.
static TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            bit += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

/// `SHIFTS[k]` is `x^(8k) mod P`, reflected (`1` is bit 31).
static SHIFTS: [u32; SHIFT_MAX + 1] = {
    let mut shifts = [0u32; SHIFT_MAX + 1];
    let mut r = 0x8000_0000u32;
    let mut k = 0;
    while k <= SHIFT_MAX {
        shifts[k] = r;
        r = (r >> 8) ^ TABLE[(r & 0xff) as usize];
        k += 1;
    }
    shifts
};

/// One step of the register over a byte.
#[inline(always)]
fn step(r: u32, byte: u8) -> u32 {
    (r >> 8) ^ TABLE[((r ^ u32::from(byte)) & 0xff) as usize]
}

/// The pure remainder of `bytes`: `bytes(x) * x^32 mod P`, no initial
/// value and no final xor.
pub fn raw(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0, |r, &b| step(r, b))
}

/// `raw` of a text followed by `zeros` zero bytes, from `raw` of the text
/// alone: `r * x^(8 zeros) mod P`. `zeros` is at most `SHIFT_MAX`.
#[inline]
pub fn shifted(r: u32, zeros: usize) -> u32 {
    mul_mod(r, SHIFTS[zeros])
}

/// `raw` of `bytes` followed by `zeros` zero bytes: what a text's CRC
/// changes by when `bytes` are xored into it `zeros` bytes before its end.
/// Up to four bytes are one polynomial of degree below 32, so one multiply
/// does it; longer windows take the table first. `zeros` is at most
/// `SHIFT_MAX - 4`.
#[inline]
pub fn window(bytes: &[u8], zeros: usize) -> u32 {
    match bytes.len() {
        0 => 0,
        n @ 1..=4 => {
            // Little-endian: the first byte's low bit is the highest
            // coefficient, x^(8n-1), which is bit 32 - 8n reflected.
            let word = bytes
                .iter()
                .rev()
                .fold(0u32, |w, &b| (w << 8) | u32::from(b));
            mul_mod(word << (32 - 8 * n), SHIFTS[zeros + 4])
        }
        _ => shifted(raw(bytes), zeros),
    }
}

/// The product of two reflected remainders, mod P.
#[inline]
fn mul_mod(a: u32, b: u32) -> u32 {
    // Bit m of the carry-less product is the coefficient of x^(62-m);
    // shifted left once, its low half is H and its high half L of
    // H * x^32 + L, and H * x^32 mod P is H run over four zero bytes.
    let p = clmul(a, b) << 1;
    let mut h = p as u32;
    for _ in 0..4 {
        h = (h >> 8) ^ TABLE[(h & 0xff) as usize];
    }
    h ^ (p >> 32) as u32
}

/// The carry-less product of two 32-bit words.
#[inline]
fn clmul(a: u32, b: u32) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("pclmulqdq") {
            // SAFETY: the CPU has the instruction, checked just above.
            return unsafe { clmul_x86(a, b) };
        }
    }
    clmul_portable(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
unsafe fn clmul_x86(a: u32, b: u32) -> u64 {
    use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_cvtsi64_si128};
    let x = _mm_cvtsi64_si128(i64::from(a));
    let y = _mm_cvtsi64_si128(i64::from(b));
    _mm_cvtsi128_si64(_mm_clmulepi64_si128::<0>(x, y)) as u64
}

fn clmul_portable(a: u32, b: u32) -> u64 {
    let a = u64::from(a);
    (0..32).fold(0u64, |acc, i| {
        acc ^ (a << i) & (u64::from(b >> i) & 1).wrapping_neg()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(x: &mut u64) -> u64 {
        *x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *x >> 11
    }

    #[test]
    fn the_table_is_zlibs() {
        // The zlib CRC-32 of the bytes below, by the byte-at-a-time loop
        // with zlib's initial value and final xor.
        let text = b"up:0.55:12,0.54:5|down:";
        let crc = !text.iter().fold(!0u32, |r, &b| step(r, b));
        assert_eq!(crc, crc32fast::hash(text));
        assert_eq!(TABLE[1], 0x7707_3096);
        assert_eq!(TABLE[255], 0x2D02_EF8D);
    }

    #[test]
    fn a_shift_is_a_run_of_zero_bytes() {
        let mut x = 7;
        for _ in 0..300 {
            let window: Vec<u8> = (0..1 + next(&mut x) % 20)
                .map(|_| next(&mut x) as u8)
                .collect();
            let zeros = (next(&mut x) as usize) % (SHIFT_MAX + 1);
            let mut padded = window.clone();
            padded.resize(window.len() + zeros, 0);
            assert_eq!(shifted(raw(&window), zeros), raw(&padded), "{zeros} zeros");
        }
        assert_eq!(shifted(0x1234_5678, 0), 0x1234_5678);
    }

    #[test]
    fn a_window_is_its_bytes_then_zeros() {
        let mut x = 11;
        for _ in 0..2_000 {
            let window_len = (next(&mut x) % 21) as usize;
            let bytes: Vec<u8> = (0..window_len).map(|_| next(&mut x) as u8).collect();
            let zeros = (next(&mut x) as usize) % (SHIFT_MAX - 3);
            let mut padded = bytes.clone();
            padded.resize(bytes.len() + zeros, 0);
            assert_eq!(window(&bytes, zeros), raw(&padded), "{bytes:?} {zeros}");
        }
    }

    #[test]
    fn the_hardware_and_portable_multiplies_agree() {
        let mut x = 99;
        for _ in 0..10_000 {
            let (a, b) = (next(&mut x) as u32, next(&mut x) as u32);
            assert_eq!(clmul(a, b), clmul_portable(a, b), "{a:#x} x {b:#x}");
        }
        assert_eq!(clmul_portable(u32::MAX, 1), u64::from(u32::MAX));
        assert_eq!(clmul_portable(0b11, 0b11), 0b101);
    }

    /// What the book does: rewrite a few bytes of a text in place and
    /// follow its checksum, then compare with hashing the new text.
    #[test]
    fn a_patched_checksum_equals_hashing_the_patched_text() {
        let mut x = 3;
        let mut text: Vec<u8> = (0..529).map(|_| b'0' + (next(&mut x) % 10) as u8).collect();
        let mut crc = crc32fast::hash(&text);
        for _ in 0..2_000 {
            let len = 1 + (next(&mut x) as usize) % 20;
            let at = (next(&mut x) as usize) % (text.len() - len + 1);
            let mut diff = [0u8; 20];
            for (i, byte) in text[at..at + len].iter_mut().enumerate() {
                let new = b'0' + (next(&mut x) % 10) as u8;
                diff[i] = *byte ^ new;
                *byte = new;
            }
            crc ^= window(&diff[..len], text.len() - at - len);
            assert_eq!(crc, crc32fast::hash(&text));
        }
    }
}
