//! The label selector lexer: a byte lexer behaving like `labels.Lexer`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok {
    End,
    Ident,
    In,
    NotIn,
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    OpenParen,
    CloseParen,
    Comma,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Token<'a> {
    pub(super) tok: Tok,
    pub(super) lit: &'a str,
}

pub(super) const END: Token<'static> = Token { tok: Tok::End, lit: "" };

pub(super) fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

pub(super) fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

pub(super) fn special_tok(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::CloseParen,
        "," => Tok::Comma,
        "!" => Tok::Bang,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::Greater,
        "<" => Tok::Less,
        "!=" => Tok::NotEquals,
        "(" => Tok::OpenParen,
        _ => return None,
    })
}

/// Reads bytes like the Go lexer: 0 means end of input, and a NUL byte in the input
/// also reads as 0 (so it ends a word or operator, and at the start of a token ends the input).
pub(super) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn read(&mut self) -> u8 {
        match self.src.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn slice(&self, from: usize, to: usize) -> &'a str {
        self.src.get(from..to).unwrap_or("")
    }

    fn next_token(&mut self) -> Token<'a> {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return END;
        }
        self.unread();
        if is_special(ch) {
            self.operator()
        } else {
            self.word()
        }
    }

    fn word(&mut self) -> Token<'a> {
        let start = self.pos;
        let end = loop {
            let before = self.pos;
            let ch = self.read();
            if ch == 0 {
                break before;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break before;
            }
        };
        let lit = self.slice(start, end);
        let tok = match lit {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident,
        };
        Token { tok, lit }
    }

    /// An operator: `==` and `!=` take two bytes, every other special byte is one token.
    /// Like the Go scanner, a NUL byte right after the operator is swallowed.
    fn operator(&mut self) -> Token<'a> {
        let start = self.pos;
        let first = self.read();
        if matches!(first, b'=' | b'!') && self.src.as_bytes().get(self.pos) == Some(&b'=') {
            self.pos += 1;
        }
        let lit = self.slice(start, self.pos);
        if self.src.as_bytes().get(self.pos) == Some(&0) {
            self.pos += 1;
        }
        // Every special byte, and `==`/`!=`, is a token, so the fallback is never used.
        Token { tok: special_tok(lit).unwrap_or(Tok::End), lit }
    }
}

pub(super) fn tokenize(src: &str) -> Vec<Token<'_>> {
    let mut lexer = Lexer { src, pos: 0 };
    let mut toks = Vec::new();
    loop {
        let t = lexer.next_token();
        toks.push(t);
        if t.tok == Tok::End {
            return toks;
        }
    }
}
