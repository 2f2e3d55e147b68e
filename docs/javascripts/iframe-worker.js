// Material's search runs in a web worker, and Chromium refuses `new Worker` on a file:// page. There this shim
// runs the worker's script in a hidden iframe of the page's own origin instead, as the `iframe-worker` package the
// offline plugin would load from unpkg.com does; bundled, the folder needs no network.
(function () {
  "use strict";
  if (location.protocol !== "file:") return; // served over http(s), real workers work

  class IFrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      this.queue = []; // messages posted before the worker's script has run
      this.frame = document.createElement("iframe");
      this.frame.hidden = true;
      document.body.appendChild(this.frame);
      const scope = (this.scope = this.frame.contentWindow);
      // What the worker posts reaches this object, copied as a real worker's message would be.
      scope.postMessage = (data) => setTimeout(() => this.receive(structuredClone(data)));
      const script = scope.document.createElement("script");
      script.src = new URL(url, location.href).href;
      script.onload = () => {
        const queued = this.queue;
        this.queue = null;
        queued.forEach((data) => this.postMessage(data));
      };
      script.onerror = () => this.fail(new ErrorEvent("error", { message: `cannot load ${script.src}` }));
      scope.document.head.appendChild(script);
    }

    receive(data) {
      const event = new MessageEvent("message", { data });
      if (this.onmessage) this.onmessage(event);
      this.dispatchEvent(event);
    }

    fail(event) {
      if (this.onerror) this.onerror(event);
      this.dispatchEvent(event);
    }

    postMessage(data) {
      if (this.queue) return void this.queue.push(data);
      const scope = this.scope;
      const copy = scope.structuredClone(data); // an object of the worker's own realm
      setTimeout(() => scope.dispatchEvent(new scope.MessageEvent("message", { data: copy })));
    }

    terminate() {
      this.frame.remove();
    }
  }

  window.IFrameWorker = IFrameWorker; // the search worker looks for it to find where its own files are
  window.Worker = IFrameWorker;
})();
