import CMicroHTTPD

// libmicrohttpd's C callbacks. Each is a global `let` (C function pointers cannot capture);
// the `ServerCore` travels as the unretained `cls` pointer, valid while the daemon runs.

/// Connection opened/closed: owns the `ConnectionContext` (retained in `socket_context`).
let mhdConnectionNotify: MHD_NotifyConnectionCallback = { cls, _, socketContext, toe in
    guard let socketContext else { return }
    if let cls {
        Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().openConnections
            .add(toe == .CONNECTION_NOTIFY_STARTED ? 1 : -1, ordering: .relaxed)
    }
    if toe == .CONNECTION_NOTIFY_STARTED {
        socketContext.pointee = Unmanaged.passRetained(ConnectionContext()).toOpaque()
    } else if let raw = socketContext.pointee {
        Unmanaged<ConnectionContext>.fromOpaque(raw).release()
        socketContext.pointee = nil
    }
}

/// Request line parsed: remember the raw target on the connection (libmicrohttpd only hands
/// the access handler its own decoding of the path). Returns NULL so the first access-handler
/// call still sees an empty `con_cls`; nothing is allocated here that a request which never
/// reaches the handler (bad headers, timeout) could leak.
let mhdURILog: mb_uri_log_callback = { _, uri, conn in
    guard let uri, let conn, let raw = mb_mhd_socket_context(conn) else { return nil }
    Unmanaged<ConnectionContext>.fromOpaque(raw).takeUnretainedValue().rawTarget = String(cString: uri)
    return nil
}

/// The access handler: called with headers (first), with each body chunk, once with size 0
/// at the end of the body, and once more after a resume.
let mhdAccess: MHD_AccessHandlerCallback = { cls, conn, _, method, _, upload, uploadSize, conCls in
    guard let cls, let conn, let conCls, let uploadSize else { return .NO }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    if let raw = conCls.pointee {
        let state = Unmanaged<RequestState>.fromOpaque(raw).takeUnretainedValue()
        return core.proceed(state, upload: upload, size: uploadSize)
    }
    let m = method.map { String(cString: $0) } ?? "GET"
    return core.begin(conn, method: m, conCls: conCls)
}

/// The request is finished (sent, failed or aborted): release its state.
let mhdCompleted: MHD_RequestCompletedCallback = { cls, _, conCls, _ in
    guard let cls, let conCls, let raw = conCls.pointee else { return }
    conCls.pointee = nil
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    core.completed(Unmanaged<RequestState>.fromOpaque(raw).takeRetainedValue())
}
