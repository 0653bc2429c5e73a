import CHTTPGuard
import CMicroHTTPD
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

// libmicrohttpd's C callbacks. Each is a global `let` (C function pointers cannot capture);
// the `ServerCore` travels as the unretained `cls` pointer, valid while the daemon runs.

/// Connection opened/closed: owns the `ConnectionContext` (retained in `socket_context`).
let mhdConnectionNotify: MHD_NotifyConnectionCallback = { cls, conn, socketContext, toe in
    guard let cls, let socketContext else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    core.openConnections.add(toe == .CONNECTION_NOTIFY_STARTED ? 1 : -1, ordering: .relaxed)
    if toe == .CONNECTION_NOTIFY_STARTED {
        let ctx = ConnectionContext(fd: conn.map { Int32(mb_mhd_connection_fd($0)) } ?? -1)
        core.deadlines.opened(ctx)
        // Over the caps: shut down at once (libmicrohttpd then closes it as a client that left).
        if core.upgrader != nil, let conn, !core.plainOpened(ctx, conn), ctx.fd >= 0 {
            Glibc.shutdown(ctx.fd, Int32(SHUT_RDWR))
        }
        socketContext.pointee = Unmanaged.passRetained(ctx).toOpaque()
    } else if let raw = socketContext.pointee {
        // Unregistered before libmicrohttpd closes the socket, so the sweeper never shuts
        // down a descriptor number that a newer connection reuses.
        let ctx = Unmanaged<ConnectionContext>.fromOpaque(raw).takeUnretainedValue()
        core.plainClosed(ctx)
        if ctx.switchedProtocols { core.upgradedOpen.subtract(1, ordering: .relaxed) }
        core.deadlines.closed(ctx)
        Unmanaged<ConnectionContext>.fromOpaque(raw).release()
        socketContext.pointee = nil
    }
}

/// Request line parsed: remember the raw target on the connection (libmicrohttpd only hands
/// the access handler its own decoding of the path). Returns NULL so the first access-handler
/// call still sees an empty `con_cls`; nothing is allocated here that a request which never
/// reaches the handler (bad headers, timeout) could leak. Then hides the query from
/// libmicrohttpd's own argument parser (`mb_mhd_hide_query`: ours reads the raw copy).
let mhdURILog: mb_uri_log_callback = { cls, uri, conn in
    guard let cls, let uri, let conn, let raw = mb_mhd_socket_context(conn) else { return nil }
    let ctx = Unmanaged<ConnectionContext>.fromOpaque(raw).takeUnretainedValue()
    ctx.rawTarget = String(cString: uri)
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().deadlines.requestLine(ctx)
    mb_mhd_hide_query(uri)
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
