import CLibPQ
import MoonbaseCore

/// One PostgreSQL connection (`PGconn*`), opened from a `postgres://` URL that libpq parses.
///
/// Thread-confined: libpq allows one thread at a time per connection
/// (https://www.postgresql.org/docs/15/libpq-threading.html), so `PGPool` hands a connection to
/// one caller at a time. Statements run with `PQexecParams`: parameters are `$1..$n` sent beside
/// the SQL in text format, never spliced into it; results are read in text format and decoded
/// by column type (`PGValue`).
///
/// ```swift
/// let c = try PGConnection(url: "postgres://postgres@127.0.0.1:5432/postgres")
/// try c.execute("CREATE TABLE IF NOT EXISTS t(id text PRIMARY KEY, n bigint)")
/// let r = try c.execute("INSERT INTO t VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", [.text("a"), .integer(1)])
/// print(r.affectedRows)
/// ```
public final class PGConnection {
    let handle: OpaquePointer
    /// The URL this connection was opened with.
    public let url: String
    private var isClosed = false
    /// Set when a statement failed with a serialization failure or deadlock since the last
    /// `resetConflict()`: the transaction around it must run again from the start.
    public private(set) var sawConflict = false

    /// Connects. `connectTimeoutSeconds` applies unless the URL sets its own `connect_timeout`.
    /// - Throws: `ParseError` 1 "database connection lost" (status 503) when the server cannot be reached.
    public init(url: String, connectTimeoutSeconds: Int = 10) throws(ParseError) {
        // Later keywords override earlier ones, and `dbname` expands the URL: so the URL's own
        // settings win over these defaults.
        let keys = ["connect_timeout", "application_name", "dbname"]
        let values = [String(connectTimeoutSeconds), "moonbase", url]
        let conn = withCStrings(keys) { k in withCStrings(values) { v in PQconnectdbParams(k, v, 1) } }
        guard let conn else { throw PGError(sqlState: "", message: "out of memory", connectionLost: true).parseError }
        guard PQstatus(conn) == CONNECTION_OK else {
            let msg = String(cString: PQerrorMessage(conn)).trimmingTrailingNewlines
            PQfinish(conn)
            throw PGError(sqlState: "", message: "cannot connect: \(msg)", connectionLost: true).parseError
        }
        mb_pq_silence_notices(conn)
        self.handle = conn
        self.url = url
    }

    deinit { close() }

    /// Closes the connection (idempotent). It must not be in use on another thread.
    public func close() {
        if isClosed { return }
        isClosed = true
        PQfinish(handle)
    }

    public var closed: Bool { isClosed }

    /// False once the connection is closed or libpq has seen it break.
    public var isUsable: Bool { !isClosed && PQstatus(handle) == CONNECTION_OK }

    /// True when no transaction is open (nor a failed one waiting for ROLLBACK).
    public var isIdle: Bool { !isClosed && PQtransactionStatus(handle) == PQTRANS_IDLE }

    /// A statement failed inside the open transaction, which now only accepts ROLLBACK.
    public var isInFailedTransaction: Bool { !isClosed && PQtransactionStatus(handle) == PQTRANS_INERROR }

    /// The server process serving this connection (for `pg_terminate_backend` in tests and logs).
    public var backendPID: Int32 { PQbackendPID(handle) }

    /// Forgets an earlier conflict (at the start of a transaction).
    public func resetConflict() { sawConflict = false }

    // MARK: Statements

    /// Runs one statement with `$1..$n` parameters and returns its rows and affected-row count.
    /// - Throws: `ParseError` (see `PGError.parseError`): 137 on a unique violation, 1 otherwise;
    ///   107 when a text parameter contains U+0000, which PostgreSQL's text cannot store.
    @discardableResult
    public func execute(_ sql: String, _ params: [PGValue] = []) throws(ParseError) -> PGResult {
        guard !isClosed else { throw PGError(sqlState: "", message: "connection is closed", sql: sql, connectionLost: true).parseError }
        var buffers: [UnsafeMutablePointer<CChar>?] = []
        buffers.reserveCapacity(params.count)
        defer { for b in buffers { b?.deallocate() } }
        for p in params {
            guard let bytes = p.parameterText else {
                buffers.append(nil)
                continue
            }
            if case .text = p, bytes.contains(0) {
                throw ParseError(.invalidJSON, "strings may not contain the NUL character (U+0000)")
            }
            let buf = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            bytes.withUnsafeBufferPointer { src in
                src.withMemoryRebound(to: CChar.self) { buf.initialize(from: $0.baseAddress!, count: bytes.count) }
            }
            buf[bytes.count] = 0
            buffers.append(buf)
        }
        let types = params.map(\.parameterType)
        let values: [UnsafePointer<CChar>?] = buffers.map { $0.map { UnsafePointer($0) } }
        let res = types.withUnsafeBufferPointer { t in
            values.withUnsafeBufferPointer { v in
                PQexecParams(handle, sql, Int32(params.count), t.baseAddress, v.baseAddress, nil, nil, 0)
            }
        }
        return try collect(res, sql: sql)
    }

    /// Runs a script of one or more statements without parameters (DDL). Never pass request data
    /// here: it is for SQL built from validated names only.
    public func executeScript(_ sql: String) throws(ParseError) {
        guard !isClosed else { throw PGError(sqlState: "", message: "connection is closed", sql: sql, connectionLost: true).parseError }
        _ = try collect(PQexec(handle, sql), sql: sql)
    }

    /// Sends `payload` to the listeners of `channel` (`pg_notify`, delivered at commit).
    public func notify(channel: String, payload: String) throws(ParseError) {
        try execute("SELECT pg_notify($1, $2)", [.text(channel), .text(payload)])
    }

    private func collect(_ res: OpaquePointer?, sql: String) throws(ParseError) -> PGResult {
        guard let res else { throw failure(nil, sql: sql) }
        defer { PQclear(res) }
        let status = PQresultStatus(res)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY else {
            throw failure(res, sql: sql)
        }
        let nf = Int(PQnfields(res)), nt = Int(PQntuples(res))
        var columns: [String] = []
        var types: [UInt32] = []
        for f in 0..<nf {
            columns.append(String(cString: PQfname(res, Int32(f))))
            types.append(PQftype(res, Int32(f)))
        }
        var rows: [PGRow] = []
        rows.reserveCapacity(nt)
        for r in 0..<nt {
            var values: [PGValue] = []
            values.reserveCapacity(nf)
            for f in 0..<nf {
                if PQgetisnull(res, Int32(r), Int32(f)) != 0 {
                    values.append(.null)
                    continue
                }
                let len = Int(PQgetlength(res, Int32(r), Int32(f)))
                let ptr = UnsafeRawPointer(PQgetvalue(res, Int32(r), Int32(f))!).assumingMemoryBound(to: UInt8.self)
                values.append(PGValue.decode(UnsafeBufferPointer(start: ptr, count: len), type: types[f]))
            }
            rows.append(PGRow(columns: columns, values: values))
        }
        let affected = Int(String(cString: PQcmdTuples(res))) ?? 0
        return PGResult(columns: columns, rows: rows, affectedRows: affected)
    }

    /// The error of a failed statement; also notes a conflict for the surrounding transaction.
    private func failure(_ res: OpaquePointer?, sql: String) -> ParseError {
        let state = res.flatMap { mb_pq_sqlstate($0) }.map { String(cString: $0) } ?? ""
        var message = res.flatMap { mb_pq_primary_message($0) }.map { String(cString: $0) } ?? ""
        if message.isEmpty { message = String(cString: PQerrorMessage(handle)).trimmingTrailingNewlines }
        let err = PGError(sqlState: state, message: message, sql: sql, connectionLost: PQstatus(handle) != CONNECTION_OK)
        if err.isRetryable { sawConflict = true }
        if err.isConnectionLoss { Log.warn("postgres: \(err.description)") }
        return err.parseError
    }
}

extension String {
    /// libpq's messages end in a newline and may span lines: one line for logs and errors.
    var trimmingTrailingNewlines: String {
        split(whereSeparator: \.isNewline).map { $0.drop { $0 == " " || $0 == "\t" } }.joined(separator: " ")
    }
}

/// Calls `body` with a NUL-terminated C string array over `strings`, NULL-terminated as libpq's
/// keyword/value arrays are.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    var ptrs: [UnsafeMutablePointer<CChar>?] = strings.map { s in
        let bytes = Array(s.utf8)
        let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
        for (i, b) in bytes.enumerated() { p[i] = CChar(bitPattern: b) }
        p[bytes.count] = 0
        return p
    }
    ptrs.append(nil)
    defer { for p in ptrs { p?.deallocate() } }
    let consts = ptrs.map { $0.map { UnsafePointer($0) } }
    return consts.withUnsafeBufferPointer { body($0.baseAddress!) }
}
