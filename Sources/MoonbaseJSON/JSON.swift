import MoonbaseCore

/// Entry points of the codec: bytes ↔ `JSONValue`.
///
/// The request path never touches Foundation's JSON (40–70 µs to parse a 1 KB document). The byte-level work is the C
/// target CJSON, shared with the Lua bridge: its tokenizer validates and its escaper
/// and number formatter write; Swift only builds and walks `JSONValue` trees.
public enum JSON {
    /// Parses a complete JSON text (RFC 8259; leading/trailing white space allowed; a UTF-8 byte
    /// order mark is refused; at most 512 nested arrays/objects; `-0` is the integer 0; integer
    /// literals beyond Int64 become doubles; a magnitude beyond Double is refused).
    /// - Throws: `ParseError` 107, "invalid JSON: <what> at offset N".
    public static func parse(_ bytes: [UInt8]) throws(ParseError) -> JSONValue {
        let r: Result<JSONValue, ParseError> = bytes.withUnsafeBufferPointer { buf in
            Result { () throws(ParseError) -> JSONValue in try parse(buf) }
        }
        return try r.get()
    }

    public static func parse(_ text: String) throws(ParseError) -> JSONValue {
        var t = text
        let r: Result<JSONValue, ParseError> = t.withUTF8 { buf in
            Result { () throws(ParseError) -> JSONValue in try parse(buf) }
        }
        return try r.get()
    }

    public static func parse(_ buf: UnsafeBufferPointer<UInt8>) throws(ParseError) -> JSONValue {
        do {
            return try JSONTape.parse(buf)
        } catch let e {
            throw ParseError(.invalidJSON, "invalid JSON: \(e.message) at offset \(e.offset)")
        }
    }

    /// Encodes a value as compact JSON bytes.
    public static func encode(_ value: JSONValue) -> [UInt8] {
        var w = JSONWriter()
        w.write(value)
        return w.bytes
    }

    public static func encodeString(_ value: JSONValue) -> String {
        String(decoding: encode(value), as: UTF8.self)
    }
}

extension JSONValue {
    /// Compact JSON bytes of this value.
    public var jsonBytes: [UInt8] { JSON.encode(self) }
    /// Compact JSON text of this value.
    public var jsonString: String { JSON.encodeString(self) }
}
