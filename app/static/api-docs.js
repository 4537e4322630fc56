// Starts Swagger UI on /api/v1/docs (app/web/api_docs.py): a file of our own, so the page
// needs no inline script and the Content-Security-Policy stays script-src 'self'.
"use strict";
window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null, // the public validator is another origin
    presets: [window.SwaggerUIBundle.presets.apis],
  });
});
