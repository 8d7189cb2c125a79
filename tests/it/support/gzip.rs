//! A gzip stream read as a Go client reads a watch: each frame inflated as it comes, so what
//! kache has sent so far decodes without the rest of the stream.

use serde_json::Value;

/// One gzip member being inflated; [`Gunzip::events`] takes the whole JSON lines so far.
pub struct Gunzip {
    inflate: flate2::Decompress,
    /// Bytes of the member's 10-byte header still to skip.
    header: usize,
    /// Inflated bytes not yet taken as whole lines.
    out: Vec<u8>,
}

impl Gunzip {
    pub fn new() -> Gunzip {
        Gunzip { inflate: flate2::Decompress::new(false), header: 10, out: Vec::new() }
    }

    /// Inflate one more frame of the member (a frame may end inside an event).
    pub fn push(&mut self, frame: &[u8]) {
        let skip = self.header.min(frame.len());
        self.header -= skip;
        let mut input = &frame[skip..];
        while !input.is_empty() {
            self.out.reserve(1 << 16);
            let before = self.inflate.total_in();
            let status = self.inflate.decompress_vec(input, &mut self.out, flate2::FlushDecompress::Sync).expect("deflate");
            input = &input[(self.inflate.total_in() - before) as usize..];
            if status == flate2::Status::StreamEnd {
                // What is left is the member's trailer.
                break;
            }
        }
    }

    /// The newline-ended JSON events inflated so far and not taken before.
    pub fn events(&mut self) -> Vec<Value> {
        let whole = self.out.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let lines: Vec<u8> = self.out.drain(..whole).collect();
        lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).expect("an event")).collect()
    }
}
